"""The contract every channel keeps: send one firing, report, never raise."""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from notifications import telemetry

if TYPE_CHECKING:
    from notifications.models import Notification


class ErrorClass(StrEnum):
    """Whether another attempt could help a failed send."""

    TRANSIENT = "transient"  # timeouts, connection errors, 5xx, 408, 429
    PERMANENT = "permanent"  # blocked address, 4xx, 410 Gone, recipient refused


@dataclass(frozen=True)
class Firing:
    """What every channel of one firing shares: one id for all its attempts."""

    notification: Notification
    firing_id: str  # webhook-id and Message-ID of every attempt of this firing
    fired_at: datetime  # when this attempt started
    channels: list[str]  # the channels this attempt delivers
    # channel -> where it delivers (`notifications.flow.targets`), set by the tick: what
    # the delivery's span names as its destination
    targets: dict[str, str] = field(default_factory=dict)

    @property
    def is_digest(self) -> bool:
        """Whether this firing sends a digest: the rows of one recipient and digest key."""
        return bool(self.notification.digest_rows)

    @property
    def rows(self) -> tuple[Notification, ...]:
        """The rows this firing sends, oldest first: a digest's, or the one row."""
        return self.notification.digest_rows or (self.notification,)

    @property
    def items(self) -> list[Any]:
        """The rows' payloads, oldest first (a digest's `items`)."""
        return [row.payload for row in self.rows]


@dataclass
class ChannelResult:
    """One channel's outcome. `error` is short, starts with the channel, holds no secret."""

    channel: str
    error: str | None = None
    error_class: ErrorClass | None = None
    http_status: int | None = None
    retry_after: float | None = None  # seconds the receiver asked us to wait
    duration: float = 0.0
    # Addresses refused for good by this send, with why (an SMTP 5xx for the recipient, a
    # provider's rejection): the tick's write-back adds them to the suppression list.
    refused: tuple[tuple[str, str], ...] = ()
    # Recipients the receiver asked to try again later (an SMTP 4xx for the recipient, as
    # greylisting answers) while it took the message for others: the firing still owes
    # them, and only them (`Notification.owed_recipients`).
    deferred: tuple[str, ...] = ()
    # The receiver answered about this message's recipients (a refusal or a deferral per
    # recipient): it is up, so the circuit breaker does not count the failure against the target.
    answered: bool = False
    # Nothing was tried: the send did not get its turn within the deadline (attachment memory,
    # NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT). A firing whose every channel says so waits,
    # due again at once, and spends no retry.
    not_sent: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class Channel(abc.ABC):
    """A way out for a firing. One instance per tick; `send` runs in worker threads."""

    name: str

    def send(self, firing: Firing) -> ChannelResult:
        """Deliver `firing`; any exception becomes an `internal:` error, never a raise."""
        started = time.monotonic()
        with telemetry.delivery(self.name, firing) as span:  # a no-op without opentelemetry
            try:
                result = self.deliver(firing)
            except Exception as exc:  # noqa: BLE001 - the contract: report, never raise
                result = ChannelResult(
                    self.name, error=f"{self.name}: internal: {type(exc).__name__}", error_class=ErrorClass.TRANSIENT
                )
            result.duration = time.monotonic() - started
            span.finish(result)
        return result

    @abc.abstractmethod
    def deliver(self, firing: Firing) -> ChannelResult:
        """Send `firing` and describe the outcome. May raise; `send` catches."""

    def prepare(self, rows: Sequence[Notification]) -> None:
        """Read what sending `rows` needs from the database, before any of them is sent.

        Called in the tick's own thread with each claimed batch: worker threads touch no
        database.
        """

    def close(self) -> None:
        """Release what the channel opened during the tick (connections, sessions)."""
