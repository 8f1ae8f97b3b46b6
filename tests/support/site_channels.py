"""Site channels as a host project writes them (NOTIFICATIONS_CHANNELS), for the tests.

Each records what it was asked to send in `SENT` (name, to, firing id), so a test sees what
went out without a network.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.exceptions import ValidationError

from notifications.channels import Channel, ChannelResult, ErrorClass, Firing

SENT: list[tuple[str, str, str]] = []
_lock = threading.Lock()
# Set by a test to release sends blocked in HangingChannel (they wait for it, never sleep).
RELEASE = threading.Event()
STARTED = threading.Event()


def record(name: str, firing: Firing) -> None:
    with _lock:
        SENT.append((name, firing.notification.channel_data[name]["to"], firing.firing_id))


class SMSChannel(Channel):
    """Texts `channel_data[name]["to"]`; it must look like +<digits>."""

    def __init__(self, *, sender: str = "ACME", **options: Any) -> None:
        super().__init__(sender=sender, **options)

    def validate(self, data: Any) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("to"), str):
            raise ValidationError("Give the number to text as 'to'.")
        if not data["to"].startswith("+") or not data["to"][1:].isdigit():
            raise ValidationError(f"{data['to']!r} is not a number in E.164 form (+15551234567).")

    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        return ChannelResult(self.name)


class TransientChannel(SMSChannel):
    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        return ChannelResult(self.name, error=f"{self.name}: 503 provider busy", error_class=ErrorClass.TRANSIENT)


class PermanentChannel(SMSChannel):
    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        return ChannelResult(self.name, error=f"{self.name}: number unreachable", error_class=ErrorClass.PERMANENT)


class RaisingChannel(SMSChannel):
    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        raise RuntimeError("provider SDK blew up with token=s3cret")


class HangingChannel(SMSChannel):
    """Ignores its deadline: blocks until the test sets RELEASE."""

    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        STARTED.set()
        RELEASE.wait(60)
        return ChannelResult(self.name)


class NotAChannel:
    def __init__(self, **options: Any) -> None:
        pass


class OddAnswerChannel(SMSChannel):
    """Returns what its OPTIONS say, unchecked: a site channel's odd answers (issue 45)."""

    def __init__(self, *, answer: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__(answer=answer, **options)
        self.answer = answer or {}

    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        return ChannelResult(self.name, **self.answer)


class BlockedChannel(SMSChannel):
    """Blocks for good on an Event nothing sets (a provider SDK stuck without a timeout):
    only a process that leaves its thread behind can exit."""

    never = threading.Event()

    def deliver(self, firing: Firing) -> ChannelResult:
        record(self.name, firing)
        self.never.wait()
        return ChannelResult(self.name)
