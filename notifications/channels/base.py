"""The contract every channel keeps: send one firing, report, never raise.

A channel is a subclass of `Channel` registered under a name: the built-in `email` and
`webhook`, or a site's own in `NOTIFICATIONS_CHANNELS` (`notifications.channels.registry`):

    class SMS(Channel):
        def __init__(self, *, sender: str, **options):
            super().__init__(sender=sender, **options)   # kept as self.options

        def validate(self, data):                         # the row's channel_data["sms"]
            if not isinstance(data, dict) or not data.get("to"):
                raise ValidationError("Give the number to text as 'to'.")

        def deliver(self, firing):
            to = firing.notification.channel_data[self.name]["to"]
            ...                                           # send, under self.timeout seconds
            return ChannelResult(self.name)               # or error="sms: ...", error_class=...

That is all a site channel writes. What the rest of the app asks of a channel is grouped by
who asks, each group a small class with defaults that need no thought, combined in
`ChannelAnswers`: `RowAnswers` (saving a row: `validate` and the errors it yields),
`FlowAnswers` (flow control and holds: `target`, `held`), `Audience` (recipients'
preferences) and `AdminView` (the admin's lines). A channel overrides what it must.

Two kinds of objects. `ChannelAnswers` answer questions about a row and hold no connection
and start no thread: `notifications.channels.registry.channel(name)` keeps one per name for
validation, the admin and flow control (`Channel.stateless` makes it). A `Channel` is a
sender of one tick: the tick makes one per name (`open`), calls `prepare` with each claimed
batch in its own thread, `send` from worker threads (so `deliver` must be thread-safe and
touch no database), and `close` at its end. A site channel is both (its instance answers
the rules too), so its `__init__` should open nothing: connect in `deliver` or `prepare`.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from notifications import otel
from notifications.channels.admin_view import AdminView
from notifications.channels.audience import Audience
from notifications.channels.flow_answers import FlowAnswers, SettingHold
from notifications.channels.row_answers import RowAnswers

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from notifications.conf import TickSettings
    from notifications.models import Notification

__all__ = ["DEFAULT_TIMEOUT", "Channel", "ChannelAnswers", "ChannelResult", "ErrorClass", "Firing", "SettingHold"]


# Seconds a channel's send may take when no tick says otherwise (NOTIFICATIONS_CHANNEL_TIMEOUT's default).
DEFAULT_TIMEOUT = 10.0


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
    # The sent log's line (`Channel.describe`): who this attempt went to and what it was.
    sent_to: str = ""
    summary: str = ""
    # Nothing was tried: the send did not get its turn within the deadline (attachment memory,
    # NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT). A firing whose every channel says so waits,
    # due again at once, and spends no retry.
    not_sent: bool = False
    # Unsaved model instances the tick's write-back inserts with the firing's outcome, in the
    # transaction that settles it (worker threads touch no database): what a channel that
    # delivers into the site's own tables delivered (the inbox's message). Each needs a
    # unique key naming its row and firing: a firing written back twice inserts it once.
    inserts: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


class ChannelAnswers(RowAnswers, FlowAnswers, Audience, AdminView):
    """What a channel says about a row outside a send, grouped by who asks (see the module's
    docstring). Holds no connection and starts no thread: one lives as long as the settings."""

    name: str = ""

    def __init__(self, **options: Any) -> None:
        self.options = options

    @classmethod
    def check(cls, name: str, options: dict[str, Any]) -> list[CheckMessage]:
        """The system checks of the channel registered as `name` with `options` (as a
        `ModelAdmin`'s `checks_class` brings its own): run by `manage.py check` for every
        registered channel whose class loads. None by default."""
        return []


class Channel(ChannelAnswers, abc.ABC):
    """A way out for a firing. One instance per name and tick; `send` runs in worker threads.

    Constructed with the `OPTIONS` of its `NOTIFICATIONS_CHANNELS` entry as keyword
    arguments (kept as `self.options`); `self.name` is the name it is registered under and
    `self.timeout` the total deadline of one send in seconds (NOTIFICATIONS_CHANNEL_TIMEOUT):
    a send still running past it (plus a grace second) is reported as timed out and left
    behind, so a channel that can honour it itself (a socket timeout) reports better errors.
    """

    timeout: float = DEFAULT_TIMEOUT
    # Whether `begin` starts a send without holding the calling thread (a channel whose I/O
    # is driven elsewhere, as the webhook's libcurl loop drives its): the tick then starts
    # the row's sends and moves on, and the row settles when the last one ends.
    asynchronous: bool = False

    @classmethod
    def open(cls, name: str, options: dict[str, Any], settings: TickSettings | None = None) -> Channel:
        """An instance registered as `name`, constructed with `options` (a tick passes its
        `settings`; outside a tick they are None)."""
        channel = cls(**options)
        if not hasattr(channel, "options"):  # a subclass that did not call super().__init__()
            channel.options = options
        channel.name = name
        if settings is not None:
            channel.timeout = settings.channel_timeout
        return channel

    @classmethod
    def stateless(cls, name: str, options: dict[str, Any]) -> ChannelAnswers:
        """The object that answers this channel's rules outside a tick (`ChannelAnswers`). A
        site channel's own instance (its rules may read its OPTIONS, and `validate` is its
        method); a built-in channel returns one that holds nothing of a sender's."""
        return cls.open(name, options)

    def send(self, firing: Firing) -> ChannelResult:
        """Deliver `firing`; any exception becomes an `internal:` error, never a raise."""
        started = time.monotonic()
        with otel.delivery(self.name, **self._traced(firing)) as span:  # a no-op without opentelemetry
            try:
                result: object = self.deliver(firing)
            except Exception as exc:  # noqa: BLE001 - the contract: report, never raise
                result = exc
            return self._ended(firing, result, started, span)

    def start(self, firing: Firing) -> Future[ChannelResult]:
        """`send` for an `asynchronous` channel: starts it (`begin`) and returns at once, a
        future of what `send` would have returned, completed in whichever thread it ends."""
        started = time.monotonic()
        span = otel.delivery_started(self.name, **self._traced(firing))
        future: Future[ChannelResult] = Future()
        future.set_running_or_notify_cancel()

        def done(result: object) -> None:
            if future.done():  # `done` called twice is a channel's bug: the first call counts
                return
            ended = self._ended(firing, result, started, span)
            try:
                future.set_result(ended)
            except InvalidStateError:  # a second call from another thread won the race
                return
            span.end()

        try:
            self.begin(firing, done)
        except Exception as exc:  # noqa: BLE001 - the contract: report, never raise
            done(exc)
        return future

    def begin(self, firing: Firing, done: Callable[[ChannelResult], None]) -> None:
        """Start sending `firing` and return; call `done` once with its result, from any
        thread, within `self.timeout` seconds (else the tick reports the row as timed out).
        Only for a channel that sets `asynchronous`; may raise, as `deliver` may."""
        raise NotImplementedError(f"{type(self).__name__} sends in a thread (deliver), it does not begin sends")

    def _traced(self, firing: Firing) -> dict[str, Any]:
        """What a send's span names: where it goes and which firing."""
        target = firing.targets.get(self.name) or self.name
        return {"target": target, "message_id": firing.firing_id, "notification_id": int(firing.notification.pk or 0)}

    def _ended(self, firing: Firing, result: object, started: float, span: otel.DeliverySpan) -> ChannelResult:
        """A send's result as `deliver` or `begin` gave it (or what it raised): timed, told to
        its span, with its log line."""
        if not isinstance(result, ChannelResult):
            # A raise, or deliver() returning something else (a TypeError of the contract).
            kind = type(result).__name__ if isinstance(result, BaseException) else "TypeError"
            result = ChannelResult(self.name, error=f"{self.name}: internal: {kind}", error_class=ErrorClass.TRANSIENT)
        result.duration = time.monotonic() - started
        # A failure's kind (the span's `error.type`): the HTTP status, else the error class.
        kind = str(result.http_status) if result.http_status else str(result.error_class or "error")
        span.finish(error=result.error, error_type=kind)
        if not (result.sent_to or result.summary):
            try:
                result.sent_to, result.summary = self.describe(firing)
            except Exception:  # noqa: BLE001 - the log's line is no reason to lose the outcome
                result.sent_to, result.summary = firing.targets.get(self.name, ""), ""
        return result

    def describe(self, firing: Firing) -> tuple[str, str]:
        """(sent_to, summary) of `firing` for the sent log: who it goes to, short (addresses,
        a host), and what it is (a subject, an event type). Never a body, a payload, a URL's
        path or query, or a secret: the log is searchable in the admin and kept for
        NOTIFICATIONS_ATTEMPT_RETENTION_DAYS. The default is the row's
        `channel_data[name]["to"]` (else the channel's target) and its subject; a channel
        says more by overriding it, or by setting the result's `sent_to`/`summary` in
        `deliver`."""
        row = firing.notification
        data = row.channel_data.get(self.name) if isinstance(row.channel_data, dict) else None
        to = data.get("to") if isinstance(data, dict) else None
        sent_to = to if isinstance(to, str) and to else firing.targets.get(self.name, "")
        return sent_to, " ".join(str(row.subject or "").split())

    @abc.abstractmethod
    def deliver(self, firing: Firing) -> ChannelResult:
        """Send `firing` and describe the outcome. May raise; `send` catches."""

    def prepare(self, rows: Sequence[Notification]) -> None:
        """Read what sending `rows` needs from the database, before any of them is sent.

        Called in the tick's own thread with each claimed batch: worker threads touch no
        database.
        """

    def leave_out(self, row: Notification, keys: Collection[str]) -> None:
        """Some of `recipient_keys(row)`, not all, turned the row's category off on this
        channel: a channel that sends to several recipients leaves them out. Called in the
        tick's own thread before the row is sent; with one key the channel is skipped instead."""

    def close(self) -> None:
        """Release what the channel opened during the tick (connections, sessions)."""
