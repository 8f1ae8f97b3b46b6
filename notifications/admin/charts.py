"""Pictures for the admin, drawn on the server as SVG: no JavaScript, readable without colour.

Each chart is one series with its name, its total and its peak written beside it, the
first and last time under it, and every bar's value in its tooltip (an SVG `<title>`);
several series are drawn as small charts one above the other, never told apart by
colour alone (failures are hatched as well as red). Each page reads its charts with one
query whatever the size of the history:

- the Notifications list: firings delivered, failed (retried) and dead-lettered per hour
  over 24 hours and per minute over the last hour, from the tick records (one a minute
  per ticking host), `activity()`;
- the Targets list: a sparkline per target of its failed deliveries per hour over
  24 hours, from the delivery log's failures index, `failures_by_target()`;
- the Tick runs list: each recent tick's duration and rows claimed, `recent_ticks()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import BooleanField, Count, F, Func, IntegerField, Q, QuerySet, Sum, Value
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from notifications.models import DeliveryAttempt, TickRun

HOURS = 24
MINUTES = 60
TICKS_SHOWN = 120  # the Tick runs chart: two hours of a single host's cron line


@dataclass(frozen=True)
class Series:
    """One chart: a name, a value per bucket, and when each bucket starts."""

    name: str
    values: list[float]
    starts: list[datetime]
    step: timedelta | None  # a bucket's length, or None for one bar per event
    css: str  # the bars' class (a fill and, for failures, a hatch)
    unit: str = ""  # written after values: `s`

    @property
    def total(self) -> float:
        return sum(self.values)

    @property
    def peak(self) -> float:
        return max(self.values, default=0)


def _floor(moment: datetime, step: timedelta) -> datetime:
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    return moment - (moment - epoch) % step


def _buckets(now: datetime, step: timedelta, count: int) -> list[datetime]:
    last = _floor(now, step)
    return [last - step * (count - 1 - i) for i in range(count)]


# --- what the pages read ----------------------------------------------------------------------


def activity(now: datetime | None = None) -> dict[str, list[Series]]:
    """Firings per hour over 24 h (`hours`) and per minute over the last hour (`minutes`),
    from the tick records of the last 24 hours (one query). A tick counts at its end."""
    now = now or timezone.now()
    hour, minute = timedelta(hours=1), timedelta(minutes=1)
    hours, minutes = _buckets(now, hour, HOURS), _buckets(now, minute, MINUTES)
    per_hour = {name: [0.0] * HOURS for name in ACTIVITY}
    per_minute = {name: [0.0] * MINUTES for name in ACTIVITY}
    for row in activity_rows(now, hours, minutes):
        bucket = int(row["bucket"])
        into, at = (per_hour, bucket) if bucket < HOURS else (per_minute, bucket - HOURS)
        for name in ACTIVITY:
            into[name][at] = float(row[name] or 0)
    return {
        "hours": _activity_series(per_hour, hours, hour),
        "minutes": _activity_series(per_minute, minutes, minute),
    }


ACTIVITY = ("delivered", "failed", "dead")


def activity_rows(now: datetime, hours: list[datetime], minutes: list[datetime]) -> QuerySet[TickRun, dict[str, Any]]:
    """The tick records summed by the database, one row per bucket (`bucket`: the hours
    0-23, then the minutes as 24-83): HOURS + MINUTES rows however many ticks ran (four
    hosts ticking every second write 345,600 records a day; reading each took seconds).

    One SELECT per bucket over its own range of the `finished_at` index, joined by UNION
    ALL: each record is read once, with no date function (SQLite's are Python callbacks),
    no CASE per record and no sort for a GROUP BY.
    """
    hour, minute = timedelta(hours=1), timedelta(minutes=1)
    spans = [(start, start + hour) for start in hours] + [(start, start + minute) for start in minutes]
    branches = [
        TickRun.objects.filter(finished_at__gte=start, finished_at__lt=end, finished_at__lte=now)
        .annotate(bucket=Value(i, output_field=IntegerField()))
        .values("bucket")
        .annotate(delivered=Sum(F("succeeded") + F("partial")), failed=Sum("retried"), dead=Sum("dead_lettered"))
        .order_by()
        for i, (start, end) in enumerate(spans)
    ]
    # No ORDER BY on the union either: Django 6.1 would apply TickRun's Meta.ordering to it,
    # a column the union's result has not.
    return branches[0].union(*branches[1:], all=True).order_by()


def _activity_series(values: dict[str, list[float]], starts: list[datetime], step: timedelta) -> list[Series]:
    return [
        Series(gettext("Delivered"), values["delivered"], starts, step, "nq-bar-ok"),
        Series(gettext("Failed, to be retried"), values["failed"], starts, step, "nq-bar-failed"),
        Series(gettext("Dead-lettered"), values["dead"], starts, step, "nq-bar-dead"),
    ]


# `outcome = 'failed'` written out, not as a parameter: SQLite uses the failures index as
# a covering index only when it can see that the query's condition is the index's own
# (with a parameter it reads each record too: 20 times slower over 100,000 failures).
FAILED_LITERALLY = Func(
    F("outcome"),
    template=f"%(expressions)s = '{DeliveryAttempt.AttemptOutcome.FAILED.value}'",
    output_field=BooleanField(),
)


def failures_by_target(keys: Iterable[str], now: datetime | None = None) -> dict[str, Series]:
    """Each of `keys`' failed deliveries per hour over 24 h (one query, over the delivery
    log's index of failures by target and time)."""
    now = now or timezone.now()
    hour = timedelta(hours=1)
    starts = _buckets(now, hour, HOURS)
    wanted = sorted(set(keys))
    values = {key: [0.0] * HOURS for key in wanted}
    if wanted:
        # One count per hour, by plain comparisons of the timestamp: no date function per
        # record (SQLite's are Python callbacks), so 100,000 failures a day stay fast.
        per_hour = {
            f"h{i}": Count("id", filter=Q(attempted_at__gte=start, attempted_at__lt=start + hour))
            for i, start in enumerate(starts)
        }
        rows = (
            DeliveryAttempt.objects.filter(FAILED_LITERALLY, target__in=wanted, attempted_at__gte=starts[0])
            .values("target")
            .annotate(**per_hour)
            .order_by()
        )
        for row in rows:
            values[row["target"]] = [float(row[f"h{i}"]) for i in range(HOURS)]
    return {key: Series(gettext("Failures"), values[key], starts, hour, "nq-bar-failed") for key in wanted}


def recent_ticks(busy_only: bool = False) -> list[Series]:
    """The last TICKS_SHOWN ticks' durations and rows claimed, oldest first (one query)."""
    ticks = TickRun.objects.order_by("-finished_at", "-pk")
    if busy_only:
        ticks = ticks.filter(claimed__gt=0)
    rows = list(ticks.values_list("started_at", "finished_at", "claimed")[:TICKS_SHOWN])[::-1]
    starts = [finished for _, finished, _ in rows]
    return [
        Series(
            gettext("Tick duration"),
            [max((f - s).total_seconds(), 0.0) for s, f, _ in rows],
            starts,
            None,
            "nq-bar-time",
            unit="s",
        ),
        Series(gettext("Rows claimed"), [float(c) for _, _, c in rows], starts, None, "nq-bar-ok"),
    ]


# --- drawing ------------------------------------------------------------------------------------

WIDTH = 600  # the viewBox's width; the SVG itself scales to its container
HEIGHT = 60


def _number(value: float, unit: str = "") -> str:
    shown = f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value)}"
    return f"{shown}{unit}" if unit else shown


def _when(moment: datetime, step: timedelta | None) -> str:
    local = timezone.localtime(moment)
    if step is not None and step < timedelta(hours=1):
        return f"{local:%H:%M}"
    return f"{local:%H:%M}" if step is not None else f"{local:%H:%M:%S}"


def _bar_title(series: Series, i: int) -> str:
    value = _number(series.values[i], series.unit)
    start = series.starts[i]
    if series.step is None:
        return f"{_when(start, None)}: {value}"
    return f"{_when(start, series.step)} to {_when(start + series.step, series.step)}: {value}"


def bars(series: Series, *, height: int = HEIGHT, label: str = "") -> SafeString:
    """One series as an SVG bar chart, with its name, total and peak in words."""
    count = max(len(series.values), 1)
    peak = series.peak or 1
    slot = WIDTH / count
    gap = min(1.0, slot / 4)
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" class="{}"><title>{}</title></rect>',
        (
            (
                f"{i * slot:.2f}",
                f"{height - max(value / peak * height, 1 if value else 0):.2f}",
                f"{max(slot - gap, 0.5):.2f}",
                f"{max(value / peak * height, 1 if value else 0):.2f}",
                series.css,
                _bar_title(series, i),
            )
            for i, value in enumerate(series.values)
        ),
    )
    summary = gettext("%(name)s: %(total)s in all, at most %(peak)s per bar") % {
        "name": series.name,
        "total": _number(series.total, series.unit),
        "peak": _number(series.peak, series.unit),
    }
    if series.unit:  # a duration's total means little: say the peak and the latest
        latest = series.values[-1] if series.values else 0
        summary = gettext("%(name)s: at most %(peak)s, latest %(latest)s") % {
            "name": series.name,
            "peak": _number(series.peak, series.unit),
            "latest": _number(latest, series.unit),
        }
    if series.step is not None:  # fixed buckets up to now: say how far back they go
        span = series.step * len(series.values)
        hours, minutes = divmod(int(span.total_seconds()) // 60, 60)
        first = (
            (gettext("%(n)d h ago") % {"n": hours})
            if hours and not minutes
            else gettext("%(n)d min ago") % {"n": hours * 60 + minutes}
        )
        last = gettext("now")
    else:
        first = _when(series.starts[0], None) if series.starts else ""
        last = _when(series.starts[-1], None) if series.starts else ""
    return format_html(
        '<figure class="nq-chart"><figcaption>{}</figcaption>'
        '<svg class="nq-svg" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" aria-label="{}">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" class="nq-axis"/>{}</svg>'
        '<div class="nq-chart-axis"><span>{}</span><span>{}</span></div></figure>',
        summary,
        WIDTH,
        height,
        f"{label or series.name}: {summary}",
        height - 0.5,
        WIDTH,
        height - 0.5,
        rects,
        first,
        last,
    )


def panel(title: str, charts: Sequence[Series], *, height: int = HEIGHT) -> SafeString:
    """Several series, one small chart each, under `title`."""
    return format_html(
        '<section class="nq-charts" aria-label="{}"><h2 class="nq-charts-title">{}</h2>{}</section>',
        title,
        title,
        format_html_join("", "{}", ((bars(s, height=height, label=f"{title}, {s.name}"),) for s in charts)),
    )


def sparkline(series: Series) -> SafeString:
    """A tiny bar chart for a list cell: the failures per hour, the total in words beside it."""
    peak = series.peak or 1
    count = max(len(series.values), 1)
    width, height = 96, 16
    slot = width / count
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" class="nq-bar-failed"><title>{}</title></rect>',
        (
            (
                f"{i * slot:.2f}",
                f"{height - max(value / peak * height, 1 if value else 0):.2f}",
                f"{max(slot - 0.5, 0.5):.2f}",
                f"{max(value / peak * height, 1 if value else 0):.2f}",
                _bar_title(series, i),
            )
            for i, value in enumerate(series.values)
        ),
    )
    total = _number(series.total)
    words = gettext("%(total)s failures in 24 h") % {"total": total}
    return format_html(
        '<span class="nq-spark"><svg viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" class="nq-axis"/>{}</svg> <span class="nq-spark-total">{}</span></span>',
        width,
        height,
        width,
        height,
        words,
        height - 0.5,
        width,
        height - 0.5,
        rects,
        total,
    )
