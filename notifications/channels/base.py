"""The contract every channel keeps: send one firing, report, never raise.

A channel is a subclass of `Channel` registered under a name: the built-in `email` and
`webhook`, or a site's own in `NOTIFICATIONS_CHANNELS` (`notifications.registry`):

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

A tick makes one instance per name (`open`), calls `prepare` with each claimed batch in its
own thread, `send` from worker threads (so `deliver` must be thread-safe and touch no
database), and `close` at its end.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from notifications import otel

if TYPE_CHECKING:
    from django.db.models import Q

    from notifications.conf import TickSettings
    from notifications.models import Notification

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

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class SettingHold:
    """A setting of the site that keeps a channel from sending some of its rows, as the
    queue's health reports it (`Channel.setting_holds`; `Channel.held` says it of one row)."""

    problem: str  # why, starting with the channel's name: `webhook: NOTIFICATIONS_WEBHOOK_SECRET is empty`
    rows: Q  # the rows it holds, a filter of `Notification`
    headline: str  # what an operator reads first: `Webhooks are held: ...`
    remedy: str  # what to do, after how many rows wait: `for a key to sign with (...): set ...`

    def warning(self, waiting: int) -> str:
        rows = "1 row waits" if waiting == 1 else f"{waiting} rows wait"
        return f"{self.headline}. {rows} {self.remedy}"


class Channel(abc.ABC):
    """A way out for a firing. One instance per name and tick; `send` runs in worker threads.

    Constructed with the `OPTIONS` of its `NOTIFICATIONS_CHANNELS` entry as keyword
    arguments (kept as `self.options`); `self.name` is the name it is registered under and
    `self.timeout` the total deadline of one send in seconds (NOTIFICATIONS_CHANNEL_TIMEOUT):
    a send still running past it (plus a grace second) is reported as timed out and left
    behind, so a channel that can honour it itself (a socket timeout) reports better errors.
    """

    name: str = ""
    # What a person reads for the channel (the preference centre), translated: `_("Email")`.
    # A site's channel takes it from its NOTIFICATIONS_CHANNELS entry's "LABEL"; without
    # either, the name, capitalised (`notifications.registry.label`).
    label: Any = None
    timeout: float = DEFAULT_TIMEOUT
    # Rows owing several channels queue in the tick under the target of the channel with the
    # highest rank (first listed among equals): a channel whose targets are many independent
    # receivers, one of which may hang (webhook hosts), ranks above one with a single target.
    dispatch_rank: int = 0
    # Its results name recipients the receiver deferred while it took the message for
    # others (`ChannelResult.deferred`): the firing then owes this channel those alone
    # (`Notification.pending_recipients`). Email's SMTP greylisting.
    tracks_recipients: bool = False
    # A row naming this channel may carry attachments (`schedule(attachments=...)`).
    takes_attachments: bool = False
    # Its `row_errors` bounds the row's `body` itself (a queued email's may be longer than
    # the core's limit of a template body); otherwise the core's limit applies.
    bounds_body: bool = False
    # The heading of the admin's fieldset of this channel's own row fields (`_("Email")`),
    # folded on the change page of a row that does not use the channel; None: no fieldset.
    admin_fieldset: Any = None
    # `headline` says what kind of message it sends, not what this one is (a webhook's
    # event type): the admin's list prefers the row's key to it.
    headline_is_generic: bool = False

    def __init__(self, **options: Any) -> None:
        self.options = options

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

    def send(self, firing: Firing) -> ChannelResult:
        """Deliver `firing`; any exception becomes an `internal:` error, never a raise."""
        started = time.monotonic()
        with otel.delivery(self.name, firing) as span:  # a no-op without opentelemetry
            try:
                result = self.deliver(firing)
                if not isinstance(result, ChannelResult):
                    raise TypeError(f"deliver() returned {type(result).__name__}, not a ChannelResult")
            except Exception as exc:  # noqa: BLE001 - the contract: report, never raise
                result = ChannelResult(
                    self.name, error=f"{self.name}: internal: {type(exc).__name__}", error_class=ErrorClass.TRANSIENT
                )
            result.duration = time.monotonic() - started
            span.finish(result)
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

    def validate(self, data: Any) -> None:
        """Refuse (raise ValidationError) this channel's entry of a row's `channel_data`.

        Called whenever a row naming this channel is saved, and by the tick on rows that
        reached the table without validation (those are dead-lettered, saying why).
        """

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        """What is wrong with `row` for this channel, by field: here, its `channel_data`
        entry (missing, or refused by `validate`; `{}` is an entry). The built-in channels keep
        what they need in fields of their own."""
        data = row.channel_data if isinstance(row.channel_data, dict) else {}
        if self.name not in data:
            return {"channel_data": [f"The {self.name} channel needs its entry: {{{self.name!r}: {{...}}}}."]}
        try:
            self.validate(data[self.name])
        except ValidationError as exc:
            return {"channel_data": [f"{self.name}: {message}" for message in exc.messages]}
        return {}

    def unnamed_errors(self, row: Notification) -> dict[str, list[str]]:
        """What is wrong with this channel's own fields on a row that does not name it (a
        value given anyway must still be one the channel could send to), by field."""
        return {}

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        """What the site's settings refuse in `row`'s fields of this channel, named or not:
        checked on every save, not again by the tick (a setting changed since is the send's
        outcome)."""
        return {}

    def target(self, row: Notification) -> str:
        """Where this channel delivers `row`, the unit of flow control (circuit breaker, rate
        limits, the tick's per-target queues): its name unless the class says otherwise."""
        return self.name

    def headline(self, row: Notification) -> str:
        """What the row's message is, in a line, for the admin's list: its subject (the title
        a message of this channel carries); blank when it has none."""
        return str(row.subject or "")

    def destination(self, row: Notification) -> str:
        """One short line for the admin: where this channel sends `row` (never a secret)."""
        data = row.channel_data if isinstance(row.channel_data, dict) else {}
        entry = data.get(self.name)
        to = entry.get("to") if isinstance(entry, dict) else None
        if isinstance(to, str):
            return to
        return self.name

    def destination_parts(self, row: Notification) -> tuple[str, str]:
        """`destination` in two for a narrow column: what names it and is shown whole (a
        host), and what follows it, cut first (a path); ("", destination) when the line is
        not split."""
        return "", self.destination(row)

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        """Why the site's configuration keeps this channel from sending `row` now (a setting
        to fix, not a failure of the row: the tick holds it, spending no retry, and the
        admin says why), or None. `settings` is the tick's snapshot (None: read them now)."""
        return None

    def setting_holds(self) -> list[SettingHold]:
        """While settings of the site (read now) keep this channel from sending rows: for each,
        why, which rows, and what to do, for the queue's health and `notifications_status`;
        empty while none does. The whole picture of what `held` says row by row."""
        return []

    def prepare(self, rows: Sequence[Notification]) -> None:
        """Read what sending `rows` needs from the database, before any of them is sent.

        Called in the tick's own thread with each claimed batch: worker threads touch no
        database.
        """

    def recipient_keys(self, row: Notification) -> list[str]:
        """Whose preferences decide whether this channel sends `row`
        (`notifications.flow.recipients`): the row's `recipient`, or nobody's."""
        return [row.recipient] if row.recipient else []

    def leave_out(self, row: Notification, keys: Collection[str]) -> None:
        """Some of `recipient_keys(row)`, not all, turned the row's category off on this
        channel: a channel that sends to several recipients leaves them out. Called in the
        tick's own thread before the row is sent; with one key the channel is skipped instead."""

    def close(self) -> None:
        """Release what the channel opened during the tick (connections, sessions)."""
