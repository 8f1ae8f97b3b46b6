"""Each registered channel's own system checks (`ChannelAnswers.check`), as a `ModelAdmin`
brings its own through `checks_class`: a channel says what is wrong with its OPTIONS or
its settings; `notifications.checks.site_channels` keeps what concerns the registry itself (W030,
W031, E032, E033).

A class that cannot be loaded is W030/W031's to report: its checks are not run.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from notifications.channels import registry


@checks.register()
def check_each_channel(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    for name, entry in registry.entries().items():
        try:
            cls = registry.channel_class(entry)
        except (ImportError, TypeError):
            continue  # W030, W031
        # A site's channel that subclasses a built-in one inherits its checks of the
        # site-wide settings: each message once.
        messages += [m for m in cls.check(name, dict(entry.options)) if m not in messages]
    return messages
