"""Delivery channels. Each `send` returns a ChannelResult and never raises."""

from notifications.channels.base import Channel, ChannelResult, ChannelRules, ErrorClass, Firing, SettingHold

__all__ = ["Channel", "ChannelResult", "ChannelRules", "ErrorClass", "Firing", "SettingHold"]
