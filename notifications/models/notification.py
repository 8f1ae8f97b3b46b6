"""The queue: one `Notification` row per reminder."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models, router, transaction
from django.db.models import JSONField, Q, Value
from django.utils import timezone

from notifications.conf import Policy, positive_int, quiet_hours
from notifications.databases import SettledOnMySQL
from notifications.models import address_keys, attachments, cleaning, states, validation
from notifications.models.addresses import AddressesField, normalise
from notifications.models.fields import HttpsURLField
from notifications.models.indexes import DueIndex, WholeIndex
from notifications.models.keys import KeyConstraint, KeyField
from notifications.models.states import State
from notifications.rules import expiry, quiet, schedule

# The queue of notifications, and of tasks enqueued without a queue of their own (Django's too).
DEFAULT_QUEUE = "default"


def default_timezone() -> str:
    return settings.TIME_ZONE or "UTC"


def default_channels() -> list[str]:
    return ["email"]


# The fields host code sets (schedule(), the admin form); the rest is the queue's own.
USER_FIELDS = (
    "channels",
    "email_to",
    "email_cc",
    "email_bcc",
    "reply_to",
    "subject",
    "body",
    "html_body",
    "template",
    "language",
    "from_email",
    "headers",
    "mailer",
    "priority",
    "webhook_url",
    "webhook_secret",
    "payload",
    "channel_data",
    "routing",
    "recurrence_rule",
    "timezone",
    "expires_at",
    "max_delay",
    "quiet_hours",
    "max_retries",
    "backoff",
    "recipient",
    "category",
    "digest_key",
    "digest_window",
    "escalate_after",
    "escalate_to",
    "escalate_unless",
)


class Priority(models.TextChoices):
    """Among due rows, higher priority is claimed first, then the oldest due time.

    A `low` row due for longer than NOTIFICATIONS_LOW_PRIORITY_AGING (an hour by default)
    is claimed as `normal`, so a steady stream of normal mail never starves it
    (`notifications.store.claims`).
    """

    NOW = "now", "Now"
    HIGH = "high", "High"
    NORMAL = "normal", "Normal"
    LOW = "low", "Low"


class Routing(models.TextChoices):
    """How a firing uses its channels: every one at once, or the first that succeeds."""

    ALL = "all", "All channels"
    FIRST = "first", "First that succeeds"


# The claim's order: "now" first.
PRIORITY_RANK = {Priority.NOW: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}


class NotificationQuerySet(models.QuerySet["Notification"]):
    """Row states as filters (`notifications.models.states` defines each). `now` is passed in so
    callers and tests control time."""

    def delete(self, *, with_attachments: bool = True) -> tuple[int, dict[str, int]]:
        """Delete the rows, and their attachments' files once the transaction commits.

        `with_attachments=False` skips the look-up of their files: for a caller that knows
        none of the rows has attachments (the tick's write-back reads them in memory).
        """
        files = attachment_files(self) if with_attachments else []
        result = super().delete()
        attachments.delete_files(files)
        return result

    def due(self, now: datetime | None = None, lease_clock: Any = None) -> NotificationQuerySet:
        """Rows a tick may claim now: due, retries left, and no live claim (compared with
        `lease_clock`, e.g. the database's `Now()`; None: with `now`)."""
        # The typed reader: a value `manage.py check` rejects must not reach the query (E002).
        return self.filter(states.claimable(now or timezone.now(), positive_int("MAX_RETRIES"), lease_clock))

    def in_state(self, state: str, now: datetime | None = None) -> NotificationQuerySet:
        """Rows whose `state` is `state` (the admin's filter values)."""
        return self.filter(states.condition(state).q(now or timezone.now()))

    def dead(self) -> NotificationQuerySet:
        return self.in_state(State.DEAD)

    def dead_letters(self, now: datetime | None = None) -> NotificationQuerySet:
        """Every row kept as a dead letter (not paused): the `dead` state and expired one-shot rows."""
        return self.filter(states.DEAD_LETTERS.q(now or timezone.now()))

    def partial(self) -> NotificationQuerySet:
        return self.in_state(State.PARTIAL)

    def retrying(self) -> NotificationQuerySet:
        return self.in_state(State.RETRYING)

    def healthy(self) -> NotificationQuerySet:
        """Rows with no failure on record: due, scheduled or parked."""
        return self.filter(states.HEALTHY.q(timezone.now()))


def attachment_files(rows: models.QuerySet[Any]) -> list[dict[str, Any]]:
    """The stored attachments of `rows` (one SELECT, of the rows that have some)."""
    return [
        item
        for value in rows.exclude(attachments=[]).order_by().values_list("attachments", flat=True)
        for item in attachments.stored(value)
    ]


class Notification(SettledOnMySQL, models.Model):
    """A reminder: when it is due, where it goes, and how its last firing went."""

    channels = models.JSONField(
        default=default_channels,
        help_text='Any of the registered channels: "email", "webhook" and NOTIFICATIONS_CHANNELS.',
    )
    # Email: recipients (JSON: `email_to` one address as a string or several as a list,
    # the others lists), the message (subject, body and html_body are templates rendered
    # with the payload; or `template` names files of the site's), and its language.
    email_to = AddressesField("to", single=True, blank=True, default=str)
    email_cc = AddressesField("cc", blank=True, default=list, db_default=Value([], JSONField()))
    email_bcc = AddressesField("bcc", blank=True, default=list, db_default=Value([], JSONField()))
    reply_to = AddressesField("reply-to", blank=True, default=list, db_default=Value([], JSONField()))
    subject = models.CharField(max_length=998, blank=True)  # RFC 5322's line limit
    body = models.TextField(blank=True)
    html_body = models.TextField(
        "HTML body",
        blank=True,
        default="",
        db_default="",
        help_text="Optional: sent as the text/html alternative of the body; the payload's values are escaped.",
    )
    template = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="A prefix of the site's templates, e.g. reminders/invoice: <prefix>/subject.txt, "
        "<prefix>/body.txt and, if it exists, <prefix>/body.html. Leave subject and bodies blank.",
    )
    language = models.CharField(
        max_length=15,
        blank=True,
        default="",
        db_default="",
        help_text="A code from the site's LANGUAGES, active while the message is rendered.",
    )
    from_email = models.CharField(
        "From",
        max_length=320,
        blank=True,
        default="",
        db_default="",
        help_text="The sender, e.g. Billing <billing@example.com>; blank: the site's DEFAULT_FROM_EMAIL.",
    )
    headers = models.JSONField(
        blank=True,
        default=dict,
        db_default=Value({}, JSONField()),
        help_text='Extra email headers, e.g. {"X-Campaign": "spring"}; Message-ID is the queue\'s own.',
    )
    # Stored through Django's storage API (notifications.models.attachments): this lists them.
    attachments = models.JSONField(blank=True, default=list, db_default=Value([], JSONField()), editable=False)
    mailer = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text="The mail backend alias this row is sent through (MAILERS, or NOTIFICATIONS_MAILERS); "
        "blank: the site's.",
    )
    priority = models.CharField(
        max_length=6,
        choices=Priority.choices,
        default=Priority.NORMAL,
        db_default=Priority.NORMAL,
        help_text="Among due rows, higher priority is claimed first.",
    )
    # A message queued by notifications.mail.QueuedEmailBackend: its subject and body are
    # sent as they are (not templates), with what has no column (alternatives, MIME shape,
    # anymail's attributes). NULL for every other row.
    message = models.JSONField(null=True, blank=True, editable=False)
    webhook_url = HttpsURLField("webhook URL", max_length=2000, blank=True)
    webhook_secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="whsec_ + base64. Blank signs with the site's NOTIFICATIONS_WEBHOOK_SECRET.",
    )
    payload = models.JSONField(default=dict, blank=True)
    # What each of the site's own channels (NOTIFICATIONS_CHANNELS) needs for this row, by
    # channel name: {"sms": {"to": "+15551234567"}}.
    channel_data = models.JSONField(
        default=dict, blank=True, db_default={}, help_text='Per channel name, what it needs: {"sms": {"to": "+1..."}}.'
    )
    routing = models.CharField(
        max_length=5,
        choices=Routing.choices,
        blank=True,  # a form left blank means the default: clean() says so
        default=Routing.ALL,
        db_default=Routing.ALL,
        help_text="all: every channel at once; first: the channels in order, until one succeeds.",
    )
    recurrence_rule = models.CharField(
        max_length=500,
        blank=True,
        help_text="Blank for one-shot; a cron expression (0 9 * * 1-5) or an RRULE.",
    )
    timezone = models.CharField(max_length=64, default=default_timezone)

    # Lifecycle (all optional): the host's own name for the row, pausing, expiry, quiet
    # hours and a retry policy of its own.
    # db_default: rows inserted by raw SQL that predates these columns still get a value.
    key = KeyField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="Your own name for this reminder (e.g. invoice-7-reminder); unique among rows that have one.",
    )
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="No firing is sent after this instant.")
    max_delay = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds: a firing later than this after its due time is not sent."
    )
    quiet_hours = models.CharField(
        max_length=11,
        blank=True,
        default="",
        db_default="",
        help_text='"HH:MM-HH:MM" in the row\'s time zone, may wrap midnight ("21:00-08:00"): nothing is sent inside.',
    )
    max_retries = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Attempts of one firing before it is dead-lettered; blank: the site's."
    )
    backoff = models.JSONField(
        null=True, blank=True, help_text="Seconds before retry 1, 2, 3 ... (a list); blank: the site's."
    )

    # Recipients (notifications.rules.categories): the host's id for the person, and the
    # kind of notification, which the person may turn off per channel. Rows of one recipient
    # and `digest_key` go out together (notifications.store.digests).
    recipient = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        db_index=True,
        help_text="Your id for the person (e.g. user:42); their preferences decide what is sent.",
    )
    category = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text="A key of NOTIFICATIONS_CATEGORIES; blank: always sent.",
    )
    # Digests (notifications.store.digests): one-shot rows of one `recipient` and
    # `digest_key` go out together, as one message per channel, at the end of a window of
    # `digest_window` seconds opened by the first of them to come due.
    digest_key = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="Rows of one recipient with this key are sent together, as one digest.",
    )
    digest_window = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds a digest collects rows, from the first one due."
    )
    # Escalation (SPEC v5): unless the firing's inbox message reaches `escalate_unless`
    # within `escalate_after` seconds of its creation, the notification goes out once more
    # through `escalate_to`. The core's rules: models/validation.py; the inbox's: its package.
    escalate_after = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds an inbox message may stay unread before the escalation goes out."
    )
    escalate_to = models.JSONField(
        default=list, blank=True, help_text='Channels the escalation goes out through, e.g. ["email"].'
    )
    escalate_unless = models.CharField(
        max_length=10,
        choices=[("read", "Read"), ("seen", "Seen")],
        blank=True,
        default="read",
        db_default="read",
        help_text="The state of the inbox message that cancels the escalation.",
    )
    # The digest this row has joined (rows of one digest share it, and settle as one);
    # NULL: not in one (yet). Rows that share it also share their firing's state.
    digest_id = models.UUIDField(null=True, blank=True, editable=False)

    # The queue the row runs in: `runtick --queue NAME` claims only the rows of the queues it
    # names. Notifications are in `default`; a task in its own queue (`notifications.tasks`).
    queue_name = models.CharField(max_length=100, default=DEFAULT_QUEUE, db_default=DEFAULT_QUEUE, editable=False)
    next_fire_at = models.DateTimeField(null=True, blank=True, help_text="Blank parks the row.")
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    error_count = models.PositiveIntegerField(default=0, editable=False)
    last_error = models.TextField(null=True, blank=True, editable=False)  # noqa: DJ001 - NULL, never "", means clean
    # The last failure an operator's requeue cleared from `last_error`, so the admin can
    # still say why the row was requeued ("previous: ..."); NULL again once a firing
    # delivers something or fails anew.
    previous_error = models.TextField(null=True, blank=True, editable=False)  # noqa: DJ001 - NULL: none
    dead_lettered_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When the last firing was not sent because it came too late (`expires_at`, `max_delay`);
    # NULL otherwise. The EXPIRED state is this column.
    expired_at = models.DateTimeField(null=True, blank=True, editable=False)

    # The current firing: its id is the webhook-id (and Message-ID) of every attempt,
    # so receivers can de-duplicate; `pending_channels` lists the channels it still owes,
    # NULL for every channel of the row (writers never store an empty list; one is read
    # as NULL, so a firing never owes nothing).
    firing_id = models.UUIDField(default=uuid.uuid4, editable=False)
    # When the current firing was due, while it waits past that (a retry's backoff, an open
    # circuit, a rate limit, a held configuration) and `next_fire_at` has moved on; NULL:
    # `next_fire_at` is the due time. `max_delay` counts from it.
    firing_due_at = models.DateTimeField(null=True, blank=True, editable=False)
    pending_channels = models.JSONField(null=True, blank=True, editable=False)
    # While the row waits as an escalation: the firing whose inbox message decides whether
    # it goes out (`notifications.outcomes.escalation`); the current firing is the
    # escalation's own and owes `escalate_to`. NULL: not an escalation.
    escalation_of = models.UUIDField(null=True, blank=True, editable=False)
    # The email recipients a firing still owes after a server deferred some of them (an SMTP
    # 4xx to RCPT, as greylisting answers) and took the message for the others:
    # `{"firing": "<firing_id>", "addresses": [...]}` (normalised addresses). It counts only
    # for that firing: a new firing id owes every recipient again. NULL: every recipient.
    pending_recipients = models.JSONField(null=True, blank=True, editable=False)
    # The channels a partial failure left undelivered (what a requeue sends again); NULL
    # when the last firing was not a partial failure. The PARTIAL state is this column.
    failed_channels = models.JSONField(null=True, blank=True, editable=False)
    # A tick's claim: write-backs only land while the token is still theirs.
    claim_token = models.UUIDField(null=True, blank=True, editable=False)
    claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    # The target (`notifications.flow.targets`) whose open circuit holds this row back; NULL
    # when nothing holds it. Closing the circuit makes these rows due at once.
    held_for = models.CharField(max_length=300, null=True, blank=True, editable=False)  # noqa: DJ001 - NULL: not held

    # An RRULE leaves its time of day, phase and COUNT to its start (DTSTART): the first
    # due time the row was given, so FREQ=DAILY from 09:00 stays at 09:00.
    starts_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NotificationQuerySet.as_manager()

    # The rows of the digest this row leads (itself first) while a tick holds them: set by
    # the digest claim, read by the channels (`Firing.rows`) and the write-back. Not a field.
    digest_rows: tuple[Notification, ...] = ()
    # The throttle (category, recipient key) this row's firing was counted against in this
    # tick, set by `flow.recipients.screen`; flow control gives the count back when it does
    # not send the row now after all. Not a field.
    throttle_counted: tuple[str, str] | None = None

    class Meta:
        ordering = ["next_fire_at", "id"]
        indexes = [
            # The due query is a range scan over this index; parked and dead rows
            # (next_fire_at NULL) are not even in it. MariaDB/MySQL: (next_fire_at, id),
            # the claim's order (notifications.models.indexes).
            DueIndex(
                fields=["next_fire_at", "error_count"],
                name="notification_due_idx",
                condition=Q(next_fire_at__isnull=False, paused_at__isnull=True),
            ),
            # The claim takes the due rows of one priority at a time (notifications.store.claims).
            models.Index(
                fields=["priority", "next_fire_at"],
                name="notification_priority_idx",
                condition=Q(next_fire_at__isnull=False, paused_at__isnull=True),
            ),
            # Claimed rows are read back and written by token; only rows in flight
            # carry one, so this index stays tiny.
            models.Index(fields=["claim_token"], name="notification_claim_idx", condition=Q(claim_token__isnull=False)),
            # Rows an open circuit holds, found by target when it closes (and counted for the admin).
            models.Index(fields=["held_for"], name="notification_held_idx", condition=Q(held_for__isnull=False)),
            # A digest's rows, by group (filing a row, claiming a digest) and by digest.
            WholeIndex(
                fields=["digest_key", "recipient"], name="notification_digest_group_idx", condition=~Q(digest_key="")
            ),
            WholeIndex(fields=["digest_id"], name="notification_digest_idx", condition=Q(digest_id__isnull=False)),
            # Rows waiting as an escalation, found each tick to settle cancelled ones
            # (notifications.store.escalations): only they carry `escalation_of`.
            WholeIndex(
                fields=["escalation_of"], name="notification_escalation_idx", condition=Q(escalation_of__isnull=False)
            ),
        ]
        constraints = [
            # Keys are unique among rows that have one, enforced by the database so that
            # concurrent schedule(key=...) calls leave one row (on MariaDB/MySQL through a
            # generated column: notifications.models.keys).
            KeyConstraint(field="key", name="notification_key_unique"),
        ]

    def __str__(self) -> str:
        return f"Notification #{self.pk} ({', '.join(self.channel_list)})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Every save through the ORM validates; only raw SQL and bulk_create bypass it.
        A due time saved inside the row's quiet hours moves to the window's end."""
        self.full_clean()
        update_fields = kwargs.get("update_fields")
        if update_fields is None or "next_fire_at" in update_fields:
            self.leave_quiet_hours(timezone.now())
        if not address_keys.saves_keys(update_fields):
            super().save(*args, **kwargs)
            return
        using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
        with transaction.atomic(using=using, savepoint=False):  # the row and its keys together
            new = self.pk is None  # nothing indexed under its id yet
            super().save(*args, **kwargs)
            (address_keys.add if new else address_keys.rewrite)([self], using)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        """Delete the row, and its attachments' files once the transaction commits."""
        files = attachments.stored(self.attachments)
        result = super().delete(*args, **kwargs)
        attachments.delete_files(files)
        return result

    def leave_quiet_hours(self, now: datetime) -> bool:
        """Move a due time inside the row's quiet hours (its own, or the site's) to the
        window's end; True if it moved. A due time already past is sent at `now`, so `now`
        is what counts then."""
        if self.next_fire_at is None:
            return False
        window = quiet.effective(self.quiet_hours, quiet_hours())
        try:
            end = quiet.end_of_window(window, self.timezone, max(self.next_fire_at, now))
        except ValueError:  # a bad window or zone: validation names it, on this same save
            return False
        if end is None:
            return False
        self.next_fire_at = end
        return True

    def clean_fields(self, exclude: Any = None) -> None:
        # Django's JSONField.validate() encodes the payload recursively: a payload nested
        # thousands deep would raise RecursionError there. Leave it to clean(), which
        # refuses it with a message.
        # A value Django's checks would raise on (an integer of 5,000 digits), or text no
        # database stores (a NUL): clean() refuses them, naming the field.
        if validation.payload_unencodable(self.payload):
            exclude = {*(exclude or ()), "payload"}
        unstorable = validation.storable_errors(self)
        self._unstorable = unstorable  # clean(), next in full_clean(), reads it rather than walk the row again
        if unstorable:
            exclude = {*(exclude or ()), *unstorable}
        # Django's IntegerField raises OverflowError on float("inf"): clean() refuses it.
        infinite = [
            n
            for n in ("max_delay", "max_retries", "digest_window", "escalate_after")
            if validation.not_finite(getattr(self, n))
        ]
        if infinite:
            exclude = {*(exclude or ()), *infinite}
        cleaning.clean_fields(self, exclude)  # Django's, on the fields a cheap look cannot clear

    def clean(self) -> None:
        if self.routing == "":
            self.routing = Routing.ALL
        if self.escalate_unless == "":  # a form left blank: the default
            self.escalate_unless = "read"
        validation.validate(self, self.__dict__.pop("_unstorable", None))

    def validate_constraints(self, exclude: Any = None) -> None:
        """As Django's, but a key already taken is an error on `key`, where a form shows it
        (Django reports a conditional unique constraint against the whole row)."""
        errors: dict[str, Any] = {}
        if self.key and (exclude is None or "key" not in exclude):
            if type(self)._default_manager.filter(key=self.key).exclude(pk=self.pk).exists():
                errors["key"] = [ValidationError(validation.KEY_TAKEN, code="unique")]
            exclude = {*(exclude or ()), "key"}  # checked just now
        try:
            super().validate_constraints(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)

    @property
    def channel_list(self) -> list[str]:
        return self.channels if isinstance(self.channels, list) else []

    @property
    def is_recurring(self) -> bool:
        return bool(self.recurrence_rule)

    @property
    def recurrence_anchor(self) -> datetime | None:
        """Where the recurrence starts: an RRULE without DTSTART counts from here."""
        return self.starts_at or self.created_at

    @property
    def owed_channels(self) -> list[str]:
        """Channels the current firing still has to deliver, in the row's order."""
        channels = self.channel_list
        if self.escalation_of is not None:  # the escalation's firing: its own channels
            channels = [c for c in self.escalate_to if isinstance(c, str)] if isinstance(self.escalate_to, list) else []
        if not self.pending_channels:
            return channels
        return [c for c in channels if c in self.pending_channels]

    @property
    def owed_recipients(self) -> set[str] | None:
        """The email recipients (normalised, `addresses.normalise`) the current firing still
        owes, or None for every recipient."""
        pending = self.pending_recipients
        if not isinstance(pending, dict) or pending.get("firing") != str(self.firing_id):
            return None
        owed = pending.get("addresses")
        if not isinstance(owed, list) or not owed:
            return None
        return {normalise(a) for a in owed if isinstance(a, str)}

    def owe_recipients(self, addresses: Iterable[str]) -> None:
        """The current firing still owes these recipients alone (normalised; the
        receiver deferred them while it took the message for the others)."""
        self.pending_recipients = {
            "firing": str(self.firing_id),
            "addresses": sorted({normalise(a) for a in addresses}),
        }

    @property
    def resend_channels(self) -> list[str]:
        """The row's channels a partial failure left undelivered: what a requeue sends again."""
        failed = self.failed_channels or []
        return [c for c in self.channel_list if c in failed]

    def state(self, now: datetime | None = None) -> State:
        return states.state_of(self, now or timezone.now())

    def retries_used_up(self, policy: Policy | None = None) -> bool:
        """A failing firing no tick claims again, yet not a dead letter: its retries (the
        row's own `max_retries`, else the site's; `states.ready`'s rule) were lowered to
        what it has already spent. A requeue starts it afresh."""
        limit = (policy or Policy.from_settings()).for_row(self.max_retries, self.backoff).max_retries
        return self.dead_lettered_at is None and self.error_count > 0 and self.error_count >= limit

    # --- transitions of a row in memory; `notifications.services` saves them -----------------

    def next_occurrence(self, now: datetime) -> datetime | None:
        """The rule's first occurrence after `now` (None: the schedule is finished)."""
        return schedule.next_occurrence(self.recurrence_rule, self.timezone, now, anchor=self.recurrence_anchor or now)

    def set_due(self, at: datetime | None) -> None:
        """A firing is due at `at` (None: parked), from then on: a new firing, or one whose
        due time was set afresh (quiet hours)."""
        self.next_fire_at = at
        self.firing_due_at = None

    def wait_until(self, at: datetime) -> None:
        """The current firing goes out later, at `at`: it keeps the time it was due."""
        if self.firing_due_at is None:
            self.firing_due_at = self.next_fire_at
        self.next_fire_at = at

    def too_late(self, at: datetime) -> str | None:
        """Why the current firing must not go out at `at` (`expires_at`, `max_delay` counted
        from when the firing was due), or None."""
        due_at = self.firing_due_at or self.next_fire_at
        return expiry.too_late(at, due_at=due_at, expires_at=self.expires_at, max_delay=self.max_delay)

    def release_claim(self, now: datetime) -> None:
        self.claim_token = None
        self.claimed_until = None
        self.updated_at = now

    def note_error(
        self, error: str | None, *, failed: list[str] | None = None, expired: datetime | None = None
    ) -> None:
        """Set `last_error`, `failed_channels` and `expired_at`, which always move together:
        `failed` names the channels of a partial failure (`last_error` then reads
        `partial: ...`), `expired` is when a firing came too late (it reads `expired: ...`).
        A firing's outcome also ends the `previous_error` a requeue kept."""
        self.last_error = states.partial_error(failed) if failed else error
        self.failed_channels = failed or None
        self.expired_at = expired
        self.previous_error = None
