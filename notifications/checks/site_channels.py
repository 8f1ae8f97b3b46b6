"""NOTIFICATIONS_CHANNELS as the registry reads it: each entry's shape, name and class (E032,
E033, W030, W031). What a channel says of its own OPTIONS is its own `ChannelAnswers.check`
(`notifications.channels.checks`)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from notifications.conf import (
    app_settings,
)

CHANNELS_HINT = (
    'For example {"sms": {"BACKEND": "myapp.channels.SMSChannel", "OPTIONS": {"sender": "ACME"}}}; '
    "see docs/channels.md. Rows naming a channel that is not usable are refused as unknown."
)


@checks.register()
def check_channels(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """NOTIFICATIONS_CHANNELS: the shape of each entry, its name, its class."""
    from notifications.channels import registry

    raw = app_settings.CHANNELS
    if not isinstance(raw, dict):
        return [
            checks.Error(
                f"NOTIFICATIONS_CHANNELS must be a dict of channel name -> settings, not {type(raw).__name__}.",
                hint=CHANNELS_HINT,
                id="notifications.E033",
            )
        ]
    messages: list[checks.CheckMessage] = []
    for name, entry in raw.items():
        if name in registry.BUILT_IN:
            messages.append(
                checks.Error(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]: {name!r} is a built-in channel; a site's channel "
                    "needs a name of its own.",
                    hint="Rename it, e.g. 'sms' or 'slack'.",
                    id="notifications.E032",
                )
            )
            continue
        problem = registry.entry_problem(name, entry)
        if problem is not None:
            messages.append(
                checks.Error(f"NOTIFICATIONS_CHANNELS: {problem}.", hint=CHANNELS_HINT, id="notifications.E033")
            )
            continue
        backend = entry["BACKEND"]
        try:
            registry.channel_class(registry.Entry(name, backend))
        # Warnings, not errors: only this channel's rows need the class (they are held, no
        # retry spent, until it loads) and the package may well be missing only where this
        # command runs; every other channel's rows go out.
        except ImportError as exc:
            messages.append(
                checks.Warning(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]['BACKEND'] = {backend!r} cannot be imported: {exc}. "
                    f"{CHANNEL_HELD}",
                    hint="Give the dotted path of the class, e.g. 'myapp.channels.SMSChannel', and install "
                    "what it imports where the tick runs.",
                    id="notifications.W030",
                )
            )
        except TypeError:
            messages.append(
                checks.Warning(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]['BACKEND'] = {backend!r} is not a subclass of "
                    f"notifications.channels.Channel. {CHANNEL_HELD}",
                    hint="Subclass notifications.channels.Channel and implement deliver(firing).",
                    id="notifications.W031",
                )
            )
    return messages


CHANNEL_HELD = "Rows naming the channel are held (nothing sent, no retry spent) until it loads."
