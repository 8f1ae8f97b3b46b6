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


class BatchAnsweringChannel(SMSChannel):
    """Sends without holding the tick's threads (`asynchronous`): `begin` hands each send to
    the channel, which answers the sends pending once `BATCH` of them are, together, from a
    thread of its own; `MOST_PENDING` records how many were begun and not yet answered
    whenever one begins. Each row is a target of its own (its number)."""

    asynchronous = True
    BATCH = 3

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.pending: list[Any] = []
        self.unanswered = 0
        self.overrun = threading.Event()
        self.lock = threading.Lock()

    def target(self, row: Any) -> str:
        return str(row.channel_data[self.name]["to"])

    def begin(self, firing: Firing, done: Any) -> None:
        record(self.name, firing)
        with self.lock:
            self.pending.append(done)
            self.unanswered += 1
            MOST_PENDING.append(self.unanswered)
            if self.unanswered > self.BATCH:
                self.overrun.set()
            if len(self.pending) < self.BATCH:
                return
            answering, self.pending = self.pending, []
        threading.Thread(target=self.answer, args=(answering,)).start()  # as a client's event loop would

    def answer(self, answering: list[Any]) -> None:
        # A tick that broke its bound would begin one more now: give it the time to show it
        # (a bound kept waits the whole half second, and passes).
        self.overrun.wait(0.5)
        for done in answering:
            with self.lock:
                self.unanswered -= 1  # before the answer: its row's slot frees when it settles
            done(ChannelResult(self.name))

    def deliver(self, firing: Firing) -> ChannelResult:
        raise AssertionError("an asynchronous channel's sends are begun, not delivered in a thread")


MOST_PENDING: list[int] = []


class NeverAnsweringChannel(BatchAnsweringChannel):
    """Begins every send and never calls `done` (a bug in an asynchronous channel)."""

    def begin(self, firing: Firing, done: Any) -> None:
        record(self.name, firing)
        STARTED.set()


class BeginRaisingChannel(BatchAnsweringChannel):
    """`begin` raises, with a secret in the message; a second row's `done` is called twice."""

    def begin(self, firing: Firing, done: Any) -> None:
        record(self.name, firing)
        if firing.notification.channel_data[self.name]["to"].endswith("1"):
            raise RuntimeError("provider SDK blew up with token=s3cret")
        done(ChannelResult(self.name))
        done(ChannelResult(self.name, error=f"{self.name}: a second answer", error_class=ErrorClass.PERMANENT))
