"""Delivery channels. Each `send` returns a ChannelResult and never raises."""

from notifications.channels.base import Channel, ChannelAnswers, ChannelResult, ErrorClass, Firing, SettingHold

__all__ = ["Channel", "ChannelAnswers", "ChannelResult", "ErrorClass", "Firing", "SettingHold"]
