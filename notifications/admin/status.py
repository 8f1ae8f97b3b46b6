"""Where a row stands, in words: the state badge, the reason, the target and the status line of a change page."""

from __future__ import annotations

from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext

from notifications.admin import display, partial_causes
from notifications.admin.display import moment
from notifications.channels import registry
from notifications.channels.holds import configuration_hold
from notifications.conf import app_settings, parse_secrets
from notifications.models import (
    Notification,
)
from notifications.models.states import State
from notifications.rules import schedule
from notifications.rules.secrets import site_secret_problem


def state_badge(state: State) -> SafeString:
    return format_html('<span class="nq-state nq-state-{}">{}</span>', state.value, state.label)


def abbreviate_error(error: str | None) -> SafeString | None:
    """An error for a list column: one line cut to the column's width, the whole on hover.
    None (the admin's empty-value marker) when there is none."""
    return display.clip(error) if error else None


def when(value: datetime, zone: str | None = None) -> str:
    """The exact time, seconds included: `2026-03-29 09:00:00 CEST (+0200)` in `zone`
    (an IANA name), else in the current time zone."""
    return display.exact(value, schedule.get_zone(zone) if zone else None)


def signing_problem() -> str | None:
    """Why the site cannot sign webhooks right now (NOTIFICATIONS_WEBHOOK_SECRET), or None."""
    return site_secret_problem(parse_secrets(app_settings.WEBHOOK_SECRET))


def held(row: Notification) -> str | None:
    """Why the tick holds `row` for a setting (its webhook needs the site's signing secret,
    which has no usable key; its email would go through the queue itself), or None. A
    list's rows carry `signs_itself` instead of the secret (`NotificationChangeList`)."""
    if row.next_fire_at is None or row.paused_at is not None:
        return None
    return configuration_hold(row, registry.channel)  # each channel says what holds it (`Channel.held`)


def reason(row: Notification) -> str | None:
    """Why the row stands where it does, in a line: a configuration hold, an open circuit
    holding it, its last error, or the error a requeue cleared (`previous: ...`) until a
    firing delivers."""
    problem = held(row)
    if problem:
        return gettext("held: %(problem)s") % {"problem": problem}
    if row.held_for:
        return gettext("held: circuit open for %(target)s") % {"target": row.held_for}
    if row.last_error:
        return partial_causes.describe(row) or row.last_error
    if row.previous_error:
        return gettext("previous: %(error)s") % {"error": row.previous_error}
    return None


def target_line(row: Notification, channel: str) -> SafeString:
    """One line of the list's *sends to*: a webhook's host whole and its path's end, or the
    recipient, cut at the column's edge; the whole on hover."""
    found = registry.channel(channel)
    head, where = found.destination_parts(row) if found is not None else ("", "?")
    if head:
        return display.target(channel, head, where)
    return format_html('<span class="nq-clip" title="{}: {}">{}</span>', channel, where, display.breakable(where))


def destination(row: Notification, channel: str) -> str:
    """Where `channel` of `row` delivers: the first recipient (`ada@example.com +2`), or the
    webhook's host and path; `?` when the row lacks it (written around validation)."""
    found = registry.channel(channel)  # each channel says itself (`Channel.destination`)
    return found.destination(row) if found is not None else "?"


def row_status(row: Notification, now: datetime) -> SafeString:
    """What happened to `row` and what comes next, in a sentence or two, for its change page."""
    state = row.state(now)
    error = format_html("<code>{}</code>", row.last_error) if row.last_error else gettext("none recorded")
    upcoming = (
        gettext("It does not fire again until requeued.")
        if row.next_fire_at is None
        else format_html(gettext("Its schedule goes on: next firing {}."), moment(row.next_fire_at, now))
    )
    if state == State.DEAD:
        return format_html(
            gettext("<strong>Dead letter</strong>: the firing was given up {}. Last error: {}. {}"),
            moment(row.dead_lettered_at, now),
            error,
            upcoming,
        )
    if state == State.EXPIRED:
        return format_html(
            gettext("<strong>Expired</strong>: the firing came too late and was not sent ({}; {}). {}"),
            moment(row.expired_at, now),
            error,
            upcoming,
        )
    if state == State.PARTIAL:
        causes = partial_causes.causes_of(row)
        failed = format_html_join(
            ", ",
            "{}{}",
            (
                (channel, format_html(" (<code>{}</code>)", causes[channel]) if channel in causes else "")
                for channel in row.resend_channels
            ),
        )
        return format_html(
            gettext(
                "<strong>Partial failure</strong> {}: {} did not go out. Last error: {}. "
                "A requeue sends only those again."
            ),
            moment(row.last_fired_at, now),
            failed or gettext("no channel it still has"),
            error,
        )
    return format_html("{}{}", _healthy_status(row, state, error, now), _held_or_previous(row))


def _healthy_status(row: Notification, state: State, error: SafeString | str, now: datetime) -> SafeString:
    due = moment(row.next_fire_at, now)
    if state == State.PAUSED:
        return format_html(
            gettext("<strong>Paused</strong> {}: nothing is sent until it is resumed."), moment(row.paused_at, now)
        )
    if state == State.RETRYING:
        attempts = ngettext("%(count)d failed attempt", "%(count)d failed attempts", row.error_count) % {
            "count": row.error_count
        }
        if row.retries_used_up():
            return format_html(
                gettext(
                    "<strong>Retrying</strong> stopped after {}: its retries were lowered to what it had spent, "
                    "so no tick takes it. Requeue it to start afresh, or purge it. Last error: {}."
                ),
                attempts,
                error,
            )
        return format_html(
            gettext("<strong>Retrying</strong> after {}; next attempt {}. Last error: {}."), attempts, due, error
        )
    if state == State.DUE:
        return format_html(gettext("<strong>Due</strong>: it came due {}; the next tick sends it."), due)
    if state == State.SCHEDULED:
        return format_html(gettext("<strong>Scheduled</strong>: next firing {}."), due)
    return mark_safe(gettext("<strong>Parked</strong>: it has no due time and does not fire."))  # noqa: S308 - constant


def _held_or_previous(row: Notification) -> SafeString | str:
    """A live row's note: held for a setting of the site, or the error a requeue cleared."""
    problem = held(row)
    if problem:
        return format_html(
            " " + gettext("Held: {}. Nothing is sent and no retry is spent until the setting is fixed."),
            problem,
        )
    if row.previous_error and not row.last_error:
        return format_html(" " + gettext("Before the requeue: {}."), format_html("<code>{}</code>", row.previous_error))
    return ""


def sentences(*parts: str) -> str:
    """The non-empty `parts`, one after the other."""
    return " ".join(part for part in parts if part)


def skipped_sentences(skipped: dict[str, int]) -> list[str]:
    """`3 skipped: nothing failed (not a dead letter or partial failure).`, one per reason."""
    return [
        gettext("%(count)d skipped: %(reason)s.") % {"count": count, "reason": why}
        for why, count in skipped.items()
        if count
    ]
