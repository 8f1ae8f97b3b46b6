"""The channel registry: the built-in channels and the site's own `NOTIFICATIONS_CHANNELS`.

    NOTIFICATIONS_CHANNELS = {"sms": {"BACKEND": "myapp.channels.SMS", "OPTIONS": {"sender": "ACME"},
                                      "LABEL": "Text message", "TIMEOUT": 30}}

Read when first used, in the shape of Django's `STORAGES` and `CACHES`: a name (alias) maps
to a `BACKEND` class, a subclass of `notifications.channels.Channel`, the `OPTIONS` it is
constructed with, and optionally the `LABEL` a person reads for it (`label`) and the
`TIMEOUT` of its sends (its deadline, as `CACHES` has one per entry; default
NOTIFICATIONS_CHANNEL_TIMEOUT). `email` and
`webhook` are registered here like any other channel, so the rest of the app asks the
registry rather than naming them.

Two kinds of objects: `channel(name)` is one long-lived `ChannelAnswers` per name for what a
channel says about a row outside a tick (its validation, its target, its admin display),
holding no connection and starting no thread (`Channel.stateless`), rebuilt whenever the
setting changes (`override_settings` works; what it drops is closed); `open_for_tick()`
makes a fresh sender per name for each tick, which prepares, sends and closes: only the
tick opens senders.

Classes are imported by their dotted path, never at this module's import: the registry
sits below the channels in the app's layers. A malformed entry (its name or shape, E032,
E033) is left out here and a row naming it is refused as an unknown channel. An entry of
the right shape whose class cannot be imported, is no channel or cannot be constructed
(W030, W031: often a package missing where this process runs) is a `BrokenChannel`: rows
naming it are accepted and held, not sent, until the setting is fixed.
"""

from __future__ import annotations

import functools
import logging
import operator
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from notifications.conf import app_settings, is_usable, maximum

if TYPE_CHECKING:
    from django.db.models import Q

    from notifications.channels.base import Channel, ChannelAnswers
    from notifications.conf import TickSettings

logger = logging.getLogger("notifications")
T = TypeVar("T")

SETTING = "NOTIFICATIONS_CHANNELS"
# The built-in channels, by name: always registered, and names no site channel may take.
BUILT_IN: dict[str, str] = {
    "email": "notifications.channels.email.channel.EmailChannel",
    "webhook": "notifications.channels.webhook.channel.WebhookChannel",
    "inbox": "notifications.channels.inbox.channel.InboxChannel",
    "task": "notifications.channels.task.channel.TaskChannel",  # django.tasks (notifications.tasks)
}
BASE_CLASS = "notifications.channels.base.Channel"
BROKEN_CLASS = "notifications.channels.broken.BrokenChannel"
# A channel's name is stored in the delivery log (16 characters) and joined with commas in
# `last_error` (`partial: sms,push`): short, lowercase, no separators.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")
MAX_LABEL_CHARS = 100  # a checkbox's label on a phone


@dataclass(frozen=True)
class Entry:
    """One registered channel: its name, the dotted path of its class, its OPTIONS."""

    name: str
    backend: str
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""  # the entry's "LABEL": what a person reads for the channel
    timeout: float | None = None  # the entry's "TIMEOUT": its sends' deadline (None: CHANNEL_TIMEOUT)

    @property
    def built_in(self) -> bool:
        return self.name in BUILT_IN


def entry_problem(name: Any, entry: Any) -> str | None:
    """Why `NOTIFICATIONS_CHANNELS[name]` cannot be registered, judged without importing
    its class (E033 reports it); None when its shape is right."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return (
            f"the name {name!r} is not a channel name (a lowercase letter, then up to 15 lowercase "
            "letters, digits, '_' or '-')"
        )
    if not isinstance(entry, Mapping):
        return f"{name!r} must be a dict with BACKEND and OPTIONS, not {type(entry).__name__}"
    unknown = set(entry) - {"BACKEND", "OPTIONS", "LABEL", "TIMEOUT"}
    if unknown:
        return f"{name!r} has unknown key(s) {', '.join(map(repr, sorted(unknown, key=str)))}"
    if not isinstance(entry.get("BACKEND"), str) or not entry.get("BACKEND"):
        return f"{name!r} needs BACKEND, the dotted path of a notifications.channels.Channel subclass"
    if not isinstance(entry.get("OPTIONS", {}), Mapping):
        return f"{name!r}: OPTIONS must be a dict of the class's keyword arguments"
    label = entry.get("LABEL", "x")
    if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL_CHARS:
        return f"{name!r}: LABEL must be the words a person reads for the channel, at most {MAX_LABEL_CHARS} characters"
    if "TIMEOUT" in entry and not is_usable("CHANNEL_TIMEOUT", entry["TIMEOUT"], integer=False):
        most = maximum("CHANNEL_TIMEOUT")
        return f"{name!r}: TIMEOUT must be the seconds one send may take, above 0 and at most {most:g}"
    return None


def site_entries() -> dict[str, Entry]:
    """The site's channels whose entries have the right shape and a name of their own."""
    raw = app_settings.CHANNELS
    if not isinstance(raw, Mapping):
        return {}
    entries = {}
    for name, entry in raw.items():
        if name in BUILT_IN or entry_problem(name, entry) is not None:
            continue
        timeout = float(entry["TIMEOUT"]) if "TIMEOUT" in entry else None
        entries[name] = Entry(name, entry["BACKEND"], dict(entry.get("OPTIONS") or {}), entry.get("LABEL", ""), timeout)
    return entries


def entries() -> dict[str, Entry]:
    """Every registered channel, the built-in ones first."""
    return {**_built_in_entries(), **site_entries()}


def _built_in_entries() -> dict[str, Entry]:
    return {name: Entry(name, path) for name, path in BUILT_IN.items()}


def channel_class(entry: Entry) -> type[Channel]:
    """The class of `entry`; ImportError or TypeError when it is none (W030, W031)."""
    cls = import_string(entry.backend)
    base = import_string(BASE_CLASS)
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise TypeError(f"{entry.backend} is not a subclass of notifications.channels.Channel")
    return cls


def label(entry: Entry) -> str:
    """What a person reads for `entry`'s channel: its "LABEL", else its class's translated
    `label`, else its name, capitalised."""
    if entry.label:
        return entry.label
    try:
        own = channel_class(entry).label
    except (ImportError, TypeError):  # E030/E031 say why
        own = None
    return str(own) if own else entry.name.replace("_", " ").replace("-", " ").capitalize()


def construct(entry: Entry, settings: TickSettings | None = None) -> Channel:
    """A new sender of `entry`'s channel, named, with its OPTIONS (a tick's, `open_for_tick`)
    and its deadline (the entry's TIMEOUT, else what the channel declares, else
    CHANNEL_TIMEOUT). A site channel whose class cannot be loaded or constructed is a
    `BrokenChannel` that holds its rows (the checks W030, W031 say why); never a crash of
    the caller."""
    channel = _built(entry, lambda cls: cls.open(entry.name, dict(entry.options), settings), settings)
    if entry.timeout is not None:
        channel.timeout = entry.timeout
    return channel


def rules_of(entry: Entry) -> ChannelAnswers:
    """What `entry`'s channel says about a row outside a tick (`Channel.stateless`): no
    connection, no thread. A class that cannot be loaded or constructed: as `construct`."""
    return _built(entry, lambda cls: cls.stateless(entry.name, dict(entry.options)), None)


def _built(entry: Entry, build: Callable[[type[Channel]], T], settings: TickSettings | None) -> T | Channel:
    """`build(the class of entry)`, or a `BrokenChannel` saying why it could not be."""
    try:
        cls = channel_class(entry)
    except (ImportError, TypeError) as exc:  # what the class's path says is wrong: no OPTIONS in it
        return _broken(entry, str(exc)[:200] or type(exc).__name__, settings)
    try:
        return build(cls)
    except Exception as exc:
        logger.exception("%s[%r]: the channel cannot be constructed", SETTING, entry.name)
        # The type alone: a constructor's message may echo an OPTIONS value (a token).
        return _broken(entry, f"{type(exc).__name__} from {entry.backend}()", settings)


def _broken(entry: Entry, problem: str, settings: TickSettings | None) -> Channel:
    broken: type[Channel] = import_string(BROKEN_CLASS)  # by path: the channels sit above the registry
    return broken.open(entry.name, {"problem": problem}, settings)


# --- what the app asks of the registry ----------------------------------------------------

_lock = threading.Lock()
_cache: dict[str, ChannelAnswers] | None = None


def names() -> tuple[str, ...]:
    """Every channel a row may name: the built-in ones, then the site's, in setting order."""
    return tuple(_instances())


def offered_names() -> tuple[str, ...]:
    """The channels a row's hints name as choices (`RowAnswers.offered`): not the internal ones."""
    return tuple(name for name, rules in _instances().items() if rules.offered)


def audience_names() -> list[str]:
    """The channels people receive and choose per category (`Audience.reaches_people`)."""
    return [name for name, rules in _instances().items() if rules.reaches_people]


def known(name: Any) -> bool:
    return isinstance(name, str) and name in _instances()


def is_built_in(name: str) -> bool:
    return name in BUILT_IN


def channel(name: str) -> ChannelAnswers | None:
    """The rules of channel `name` (for validation, targets and display), long-lived and
    stateless; None for a name no usable channel has."""
    return _instances().get(name)


def _instances() -> dict[str, ChannelAnswers]:
    """name -> its rules, built on first use and again after NOTIFICATIONS_CHANNELS changes
    (`setting_changed`: override_settings). A site class that cannot be imported or
    constructed is a `BrokenChannel` (the checks say why). The tick asks several times per
    row, so a hit is one global read."""
    global _cache
    cached = _cache
    if cached is not None:
        return cached
    with _lock:
        if _cache is not None:
            return _cache
        built = {name: rules_of(entry) for name, entry in entries().items()}
        _cache = built
        return built


def reset(**kwargs: Any) -> None:
    """Forget the rules objects, closing any that can close (a site channel's own instance
    may hold a session): the next use builds them from the settings as they are then."""
    global _cache
    if kwargs.get("setting") not in (None, SETTING):
        return
    with _lock:
        dropped, _cache = _cache or {}, None
    for name, rules in dropped.items():
        close = getattr(rules, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception:
            logger.exception("%s[%r]: the channel cannot be closed", SETTING, name)


setting_changed.connect(reset, dispatch_uid="notifications.channels.registry.reset")


def open_for_tick(settings: TickSettings) -> dict[str, Channel]:
    """One fresh instance per registered channel for one tick. A site channel whose class
    cannot be loaded or constructed is a `BrokenChannel` (its rows held, as `channel(name)`
    says) instead of a tick that crashes."""
    return {name: construct(entry, settings) for name, entry in entries().items()}


def escalation_cancelled() -> Q | None:
    """Rows waiting as an escalation that a channel's delivery cancelled (each channel's
    `escalation_cancelled`, joined), or None when no registered channel cancels any."""
    found = [q for q in (answers.escalation_cancelled() for answers in _instances().values()) if q is not None]
    return functools.reduce(operator.or_, found) if found else None
