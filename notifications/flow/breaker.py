"""Circuit breakers, one per target, kept in `notifications.models.Target`.

After `failures` consecutive failed deliveries to a target its circuit opens: rows to it
are held (not sent, no retry spent, no attempt logged) until `retry_at`; then exactly one
row goes out as a probe. The probe is claimed in the database (one UPDATE of the Target
row from open to half_open where `retry_at` has passed), so one tick wins however many
run on however many hosts. Success closes the circuit and makes its held rows due at
once; failure re-opens it with the cooldown doubled, up to `max_cooldown`.

What counts: a channel result that failed transiently (timeout, connection error, 5xx,
408, 429) extends the target's streak. A permanent failure (another 4xx, 410 Gone, a
refused recipient) is an answer from a live receiver about one row: like a success it
ends the streak, so one malformed payload cannot open a host's circuit. So is a mail
server's answer about the recipients of one message, even a temporary one (a 451 to
RCPT: greylisting): a dozen greylisted reminders must not stop every email.

All of this runs in the tick's own thread (workers touch no database): `Breaker.admit`
once per claimed batch, `Breaker.observe` right after each write-back.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from notifications import signals, store
from notifications.channels import ChannelResult, ErrorClass
from notifications.conf import MAX_DELAY_SECONDS, Defaults, app_settings
from notifications.flow.targets import RowTargets, Targets, distinct
from notifications.models import Notification, Target

logger = logging.getLogger("notifications.tick")

ERROR_SHOWN = 500  # characters of the last error kept on a target
# How far a circuit's `retry_at` may be past what its cooldown (or a probe's lease) allows
# and still count (seconds). Further ahead, it was written by a host whose clock runs fast
# (an hour, say): the cooldown counts as over and the probe is claimed on that very value, so
# a correct host probes the target at once instead of holding it until the clocks catch up.
RETRY_AHEAD = 30.0
BREAKER_KEYS = ("failures", "cooldown", "max_cooldown")


@dataclass(frozen=True)
class BreakerSettings:
    """NOTIFICATIONS_CIRCUIT_BREAKER, typed. `failures` 0 turns the breaker off."""

    failures: int = 10
    cooldown: float = 60.0
    max_cooldown: float = 3600.0

    @property
    def enabled(self) -> bool:
        return self.failures > 0

    @classmethod
    def read(cls) -> BreakerSettings:
        """The site's setting; a value the checks reject (E019) falls back to the defaults."""
        value = app_settings.CIRCUIT_BREAKER
        if breaker_errors(value):
            value = Defaults.CIRCUIT_BREAKER
        merged = {**Defaults.CIRCUIT_BREAKER, **value}
        return cls(int(merged["failures"]), float(merged["cooldown"]), float(merged["max_cooldown"]))


def breaker_errors(value: Any) -> list[str]:
    """What is wrong with a NOTIFICATIONS_CIRCUIT_BREAKER value; empty when it is usable."""
    if not isinstance(value, dict):
        return [f"must be a dict with the keys {', '.join(BREAKER_KEYS)}, not {type(value).__name__}"]
    errors = [f"unknown key {key!r}" for key in value if key not in BREAKER_KEYS]
    failures = value.get("failures", 0)
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
        errors.append(f"'failures' must be an integer >= 0 (0 turns the breaker off), not {failures!r}")
    for key in ("cooldown", "max_cooldown"):
        seconds = value.get(key, 1)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DELAY_SECONDS:
            errors.append(
                f"{key!r} must be a positive number of seconds no larger than {MAX_DELAY_SECONDS:,}, not {seconds!r}"
            )
    if not errors:
        merged = {**Defaults.CIRCUIT_BREAKER, **value}
        if merged["max_cooldown"] < merged["cooldown"]:
            errors.append("'max_cooldown' must not be shorter than 'cooldown'")
    return errors


@dataclass
class Streak:
    """One target's results in one write-back, in order: did the streak end, and how many
    failures followed (and the last of them)."""

    ended: bool = False
    failures: int = 0
    last_error: str = ""


@dataclass
class Admission:
    """A batch after the breaker: rows to send, rows held (with until when, and for which
    target), and the probes among the rows to send."""

    send: list[Notification] = field(default_factory=list)
    held: list[tuple[Notification, datetime, str]] = field(default_factory=list)
    probes: dict[Any, str] = field(default_factory=dict)  # row pk -> target it probes


class Breaker:
    """One tick's view of the circuit breakers; every decision is made in the database."""

    def __init__(self, settings: BreakerSettings, probe_lease: float) -> None:
        self.settings = settings
        self.probe_lease = probe_lease  # how long a probe that never reports back blocks the next
        self.known: dict[str, Target] = {}  # targets with a row, as last read
        self.probes: dict[Any, str] = {}  # probes in flight: row pk -> target
        # Failures in a row per target as this tick's results arrive, and the targets they
        # tripped (held until when): `watch`, ahead of the write-back that opens the circuit.
        # Workers watch their own results, so they share these under a lock.
        self.run: Counter[str] = Counter()
        self.tripped: dict[str, datetime] = {}
        self.new_trips: dict[str, datetime] = {}  # tripped since the tick last asked (`take_new_trips`)
        self.lock = threading.Lock()

    def admit(self, rows: Sequence[Notification], now: datetime, targets: RowTargets) -> Admission:
        """Split a claimed batch: rows to send, rows held by an open circuit, probes.

        One SELECT of the batch's targets that have a row; one UPDATE per probe claimed.
        """
        admission = Admission()
        if not self.settings.enabled:
            admission.send = list(rows)
            return admission
        wanted = {target for row in rows for target in distinct(targets[row.pk])}
        for target in Target.objects.filter(key__in=wanted):
            self.known[target.key] = target
        for row in rows:
            hold = self._hold(row, distinct(targets[row.pk]), now, admission)
            if hold is None:
                admission.send.append(row)
            else:
                admission.held.append((row, *hold))
        self.probes.update(admission.probes)
        return admission

    def _hold(
        self, row: Notification, keys: list[str], now: datetime, admission: Admission
    ) -> tuple[datetime, str] | None:
        """Until when, and for which of its targets (`keys`), `row` is held; None to send it
        (maybe as a probe)."""
        probe_for = None
        for key in keys:
            if key in self.tripped:
                return self.tripped[key], key
            target = self.known.get(key)
            if target is None or target.state == Target.State.CLOSED:
                continue
            if (
                target.retry_at is not None
                and (target.retry_at <= now or self._ahead(target, now))
                and probe_for is None
            ):
                probe_for = key  # due for a probe: claimed below, if nothing else holds the row
                continue
            return self._held_until(target, now), key
        if probe_for is not None:
            if not self._claim_probe(probe_for, now):
                target = self.known[probe_for]
                return self._held_until(target, now), probe_for
            admission.probes[row.pk] = probe_for
        return None

    def _ahead(self, target: Target, now: datetime) -> bool:
        """`target.retry_at` is further ahead than a cooldown or a probe's lease from now can
        put it: written by a host whose clock runs fast (see RETRY_AHEAD). A circuit with no
        cooldown on record (opened by hand, or by host code) may wait up to `max_cooldown`."""
        cooldown = target.cooldown or self.settings.max_cooldown
        allowed = max(cooldown, self.probe_lease) + RETRY_AHEAD
        return target.retry_at is not None and target.retry_at > now + timedelta(seconds=allowed)

    def _held_until(self, target: Target, now: datetime) -> datetime:
        if target.retry_at is not None and target.retry_at > now and not self._ahead(target, now):
            return target.retry_at
        # Held open by hand, or a probe someone else just claimed: look again later.
        return now + timedelta(seconds=self.settings.max_cooldown if target.manual else self.probe_lease)

    def _claim_probe(self, key: str, now: datetime) -> bool:
        """Take the one probe of `key`'s cooldown: True for the tick whose UPDATE wins."""
        until = now + timedelta(seconds=self.probe_lease)
        target = self.known[key]
        stale = target.retry_at if self._ahead(target, now) else None
        won = Target.objects.start_probe(key, now=now, until=until, stale=stale)
        target.retry_at = until
        target.state = Target.State.HALF_OPEN
        if won:
            logger.info("target %s: probe sent", key)
        return bool(won)

    def watch(self, outcome: Any, now: datetime, targets: Targets) -> None:
        """One row's results as they arrive (from a worker's thread), before their batch is
        written back: a target that has just failed `failures` times in a row in this tick
        is tripped, held until the cooldown has passed.

        Workers start no further sends to a tripped target (`tripped`), and the tick
        holds its waiting rows (`take_new_trips`) instead of sending them into the same
        failure; the circuit itself opens when the results are written back (`observe`),
        from the streak kept in the database. Probes are left to `observe`.
        """
        if not self.settings.enabled or outcome.row.pk in self.probes:
            return
        with self.lock:
            for result in outcome.results:
                key = targets.get(result.channel, "")
                if not key:
                    continue
                if not _counts_as_failure(result):
                    self.run[key] = 0
                    self.tripped.pop(key, None)  # it answers again: let the write-back decide
                    continue
                self.run[key] += 1
                if self.run[key] >= self.settings.failures and key not in self.tripped:
                    self.tripped[key] = self.new_trips[key] = now + timedelta(seconds=self.settings.cooldown)

    def take_new_trips(self) -> dict[str, datetime]:
        """The targets tripped since the last call, with until when their rows are held."""
        with self.lock:
            trips, self.new_trips = self.new_trips, {}
            return trips

    def observe(self, outcomes: Iterable[Any], now: datetime, targets: RowTargets) -> set[str]:
        """After a write-back: extend or end failure streaks, open circuits, settle probes.
        Returns the targets whose held rows are due again (a probe closed the circuit, or
        a trip did not open it): the tick asks the store to release them."""
        if not self.settings.enabled:
            return set()
        streaks: dict[str, Streak] = {}
        probed: dict[str, bool] = {}
        held: set[str] = set()  # targets rows of this write-back were held for
        for outcome in outcomes:
            if outcome.row.held_for:
                held.add(outcome.row.held_for)
            probe = self.probes.pop(outcome.row.pk, None)
            for result in outcome.results:
                key = targets.get(outcome.row.pk, {}).get(result.channel, "")
                if not key:
                    continue
                failed = _counts_as_failure(result)
                if key == probe:
                    probed[key] = not failed
                    continue
                streak = streaks.setdefault(key, Streak())
                if failed:
                    streak.failures += 1
                    streak.last_error = result.error or ""
                else:
                    streak.ended, streak.failures = True, 0
        released = set()
        for key, ok in probed.items():
            if ok:
                self._close(key, now)
                released.add(key)
                streaks.pop(key, None)
            else:
                self._reopen(key, now, streaks.pop(key) if key in streaks else None)
        self._save_streaks(streaks, now)
        return released | self._unopened(held)

    def _unopened(self, held: set[str]) -> set[str]:
        """Targets rows were held for that this tick tripped (`watch`) whose circuit did not
        open once the results were written back (a success came between the failures): no
        Target an operator could close holds those rows, so they are due again now."""
        tripped = held & set(self.tripped)
        if not tripped:
            return set()
        open_keys = set(
            Target.objects.filter(key__in=tripped).exclude(state=Target.State.CLOSED).values_list("key", flat=True)
        )
        with self.lock:
            for key in tripped - open_keys:
                self.tripped.pop(key, None)
        return tripped - open_keys

    def _save_streaks(self, streaks: dict[str, Streak], now: datetime) -> None:
        ended = [k for k, s in streaks.items() if s.ended and not s.failures and self._has_streak(k)]
        if ended:
            Target.objects.filter(key__in=ended, state=Target.State.CLOSED, failures__gt=0).update(failures=0)
        failing = {k: s for k, s in streaks.items() if s.failures}
        if not failing:
            return
        missing = [k for k in failing if k not in self.known]
        if missing:
            Target.objects.bulk_create([Target(key=k, updated_at=now) for k in missing], ignore_conflicts=True)
        for key, streak in failing.items():
            base = 0 if streak.ended else F("failures")
            Target.objects.filter(key=key).update(
                failures=base + streak.failures, last_error=streak.last_error[:ERROR_SHOWN], updated_at=now
            )
            self._open_if_due(key, now)

    def _has_streak(self, key: str) -> bool:
        target = self.known.get(key)
        return target is not None and target.failures > 0

    def _open_if_due(self, key: str, now: datetime) -> None:
        cooldown = self.settings.cooldown
        opened = Target.objects.trip(key, failures=self.settings.failures, now=now, cooldown=cooldown)
        if opened:
            target = Target.objects.get(key=key)
            self.known[key] = target
            logger.warning("target %s: circuit opened after %d failures", key, target.failures)
            _send(signals.target_opened, target)

    def _close(self, key: str, now: datetime) -> None:
        """The probe got through: close (the tick then makes the rows held for it due now)."""
        if Target.objects.close(key, now=now, only_half_open=True):
            logger.info("target %s: probe succeeded, circuit closed", key)
            _send(signals.target_closed, Target.objects.get(key=key))

    def _reopen(self, key: str, now: datetime, streak: Streak | None) -> None:
        """The probe failed: open again, the cooldown doubled up to max_cooldown."""
        target = Target.objects.filter(key=key).first()
        if target is None or target.state != Target.State.HALF_OPEN:
            return
        cooldown = min(max(target.cooldown, self.settings.cooldown) * 2, self.settings.max_cooldown)
        Target.objects.reopen(key, now=now, cooldown=cooldown, failures=1 + (streak.failures if streak else 0))
        logger.warning("target %s: probe failed, circuit open for %gs", key, cooldown)


def _counts_as_failure(result: ChannelResult) -> bool:
    """A failure that says the target is unwell: transient, and not an answer about the
    message's own recipients (greylisting's 451 for a recipient comes from a live server)."""
    return not result.ok and result.error_class != ErrorClass.PERMANENT and not result.answered


def _send(signal: Any, target: Target) -> None:
    if not signal.has_listeners(Target):
        return
    for receiver, response in signal.send_robust(Target, target=target):
        if isinstance(response, Exception):
            logger.error("signal receiver %r failed: %r", receiver, response)


# --- operator actions and the rows a circuit holds ---------------------------------------


def close(key: str, now: datetime | None = None, *, only_half_open: bool = False) -> bool:
    """Close `key`'s circuit and release its held rows (due now); True if it was not closed.

    The admin's `close_circuit` (any state but closed) and a successful probe (half_open only).
    """
    now = now or timezone.now()
    closed = Target.objects.close(key, now=now, only_half_open=only_half_open)
    store.release_held(key, now)
    if closed:
        _send(signals.target_closed, Target.objects.get(key=key))
    return bool(closed)


def open_by_hand(key: str, now: datetime | None = None) -> bool:
    """Hold every row to `key` until an operator closes it again; True if it was not open by hand."""
    now = now or timezone.now()
    target, _ = Target.objects.get_or_create(key=key, defaults={"updated_at": now})
    if target.state == Target.State.OPEN and target.manual:
        return False
    was_closed = target.state == Target.State.CLOSED
    Target.objects.hold_open(key, now=now)
    if was_closed:
        target.refresh_from_db()
        _send(signals.target_opened, target)
    return True
