"""What the models ask of the registered channels, behind a hook the app fills at start-up.

The models sit below the channels in the app's layers, yet saving a row validates it
whole, its channels' rules included (SPEC: the API, the admin and forms validate
everything). Rather than reach up to the registry, the models name what they need
(`ChannelValidation`) and `NotificationsConfig.ready()` installs the channels' answer
(`notifications.channels.validation`): dependency inversion, so imports run downward only
and `Notification.save()` keeps validating everything. Before `ready()` no row can be
saved anyway (Django's app registry is not ready); asking then is an error that says so.

A leaf module: the standard library and Django only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from notifications.models.notification import Notification


class ChannelValidation(Protocol):
    """The channels' part of validating a row, asked of every registered channel."""

    def names(self) -> tuple[str, ...]:
        """Every channel a row may name, in the registry's order."""

    def list_errors(self, channels: Any) -> list[str]:
        """What is wrong with a row's `channels` list (empty, unknown names, repeats)."""

    def row_errors(self, row: Notification, named: list[str]) -> dict[str, list[str]]:
        """What each registered channel finds wrong with `row`, which names `named`."""

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        """What the site's settings refuse in `row`, asked of every registered channel."""

    def take_attachments(self, named: list[str]) -> bool:
        """Whether one of the channels `named` takes attachments."""

    def bound_body(self, named: list[str]) -> bool:
        """Whether one of the channels `named` bounds the body itself."""

    def attachments_refused(self) -> str:
        """Why a row none of whose channels takes attachments may not carry any."""


_installed: ChannelValidation | None = None


def install(validation: ChannelValidation) -> None:
    """Use `validation` for the channels' part of every row's validation (`AppConfig.ready()`)."""
    global _installed
    _installed = validation


def channels() -> ChannelValidation:
    """The installed channels' validation; ImproperlyConfigured before the app is ready."""
    if _installed is None:
        raise ImproperlyConfigured(
            "The notifications app is not ready: validating a row asks its channels, which "
            "NotificationsConfig.ready() installs (add 'notifications' to INSTALLED_APPS and call django.setup())."
        )
    return _installed
