"""Who a row names, as an index: one `AddressKey` per (person, row), so erasure finds a
person's rows with an index lookup instead of reading the address columns of every row.

A row's keys (`keys_of`) are its `recipient` (as stored, and normalised when it is an
address), every address of To, Cc, Bcc and Reply-To and of the firing's owed recipients
(`addresses.bare`: any case, a display name, an internationalised domain as typed or as
punycode are one key), and the addresses written in its From, its headers' values and its
errors. They are stored as a SHA-256 digest of the key: fixed width (no column length, no
MariaDB collation folding a key), and the index itself shows no address.

The writers: `add` for rows just inserted (`services.inserting`, which schedule(),
schedule_many(), QueuedEmailBackend and the HTTP API all go through), `rewrite` for rows
saved again (`Notification.save`, the admin's and `edit`'s path; a keyed replace; an
operator action or an erasure that changes these columns). The tick writes none of them
but `pending_recipients` (addresses of the row already) and errors, which name the row's
own recipients. A deleted row's keys go with it: the migration gives `notification_id` a
foreign key ON DELETE CASCADE in the database (0028), so every delete (the write-back,
a purge, raw SQL) takes them, at no statement of its own. Rows written around the app
(`bulk_create`, raw SQL) are not indexed: `index_all` indexes every row again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import connections, models, router, transaction

from notifications.models.addresses import as_list, bare, normalise

# The columns a key is read from; saving any of them rewrites the row's keys.
LISTED = ("email_to", "email_cc", "email_bcc", "reply_to")
WRITTEN = ("from_email", "last_error", "previous_error")
KEYED_FIELDS = frozenset({"recipient", *LISTED, *WRITTEN, "headers", "pending_recipients"})

# Key/row pairs per INSERT: 800 parameters, within SQLite's oldest limit (999).
PAIRS_PER_STATEMENT = 400
# Rows read at a time by `index_all`.
CHUNK = 2000

# An address written in free text: `mentions` (addresses.py) finds a key there when it is not
# part of a longer address, so every place a local part may start is a key of its own
# (`x=ada@example.com` names `x=ada@example.com` and `ada@example.com`).
_AROUND_AT = re.compile(r"([^\s<>()\[\],;:\"@]+)@([\w.-]+)")
_LOCAL_BOUNDARY = re.compile(r"(?<![\w.+-])")
# A display name of letters, digits, blanks, dots, hyphens and apostrophes before one
# `<mailbox>` of no character the parser treats apart: what `parseaddr` returns is the mailbox.
_PLAIN_NAMED = re.compile(r"\s*[\w .'-]*<([^\s<>()\[\]\",;:\\@]+@[^\s<>()\[\]\",;:\\@]+)>\s*")


class AddressKey(models.Model):
    """One person a row names (`keys_of`), by the digest of the key (`digest`)."""

    key = models.CharField(max_length=64)
    # DO_NOTHING in Django: the database deletes (and renumbers) a row's keys with it,
    # through the constraint the migration adds.
    notification = models.ForeignKey(
        "notifications.Notification", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )

    class Meta:
        indexes = [
            # Erasure's lookup, answered from the index alone.
            models.Index(fields=["key", "notification"], name="notification_address_key_idx"),
            # A row's keys, rewritten when it is saved, deleted with it (the cascade).
            models.Index(fields=["notification"], name="notification_address_row_idx"),
        ]

    def __str__(self) -> str:
        return f"key of notification #{self.notification_id}"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def written_in(text: Any) -> set[str]:
    """The normalised addresses free text writes (every place their local part may start)."""
    if not isinstance(text, str) or "@" not in text:
        return set()
    found: set[str] = set()
    for match in _AROUND_AT.finditer(text):
        local, domain = match.group(1), match.group(2).rstrip(".")
        for start in _LOCAL_BOUNDARY.finditer(local):
            if local[start.start() :]:
                found.add(normalise(f"{local[start.start() :]}@{domain}"))
    return found


def key_of(address: str) -> str:
    """`addresses.bare(address)`; a plain `Name <box@host>` without asking the email parser
    (a tenth of the time: a 100,000-row schedule_many() computes it for every address)."""
    plain = _PLAIN_NAMED.fullmatch(address)
    return normalise(plain.group(1)) if plain else bare(address)


def keys_of(row: Any) -> set[str]:
    """The keys of `row` (anything with the columns' attributes; see the module)."""
    keys: set[str] = set()
    recipient = getattr(row, "recipient", "")
    if isinstance(recipient, str) and recipient:
        keys.add(recipient)
        if "@" in recipient:
            keys.add(bare(recipient))
    for name in LISTED:
        keys.update(key_of(address) for address in as_list(getattr(row, name, None)))
    pending = getattr(row, "pending_recipients", None)
    if isinstance(pending, dict):
        keys.update(bare(address) for address in as_list(pending.get("addresses")))
    headers = getattr(row, "headers", None)
    texts = [getattr(row, name, None) for name in WRITTEN]
    texts += list(headers.values()) if isinstance(headers, dict) else []
    for text in texts:
        keys.update(written_in(text))
    return {key for key in keys if key}


def saves_keys(update_fields: Iterable[str] | None) -> bool:
    """Whether a save of `update_fields` (None: every field) may change a row's keys."""
    return update_fields is None or not KEYED_FIELDS.isdisjoint(update_fields)


def add(rows: Sequence[Any], using: str | None = None, keys: Sequence[set[str]] | None = None) -> None:
    """Index `rows`, inserted just now (none of them has a key yet); `keys`: their
    `keys_of`, when the caller has them. In the caller's transaction: a row and its keys
    are stored together or not at all."""
    found = keys if keys is not None else [keys_of(row) for row in rows]
    pairs = ((key, row.pk) for row, row_keys in zip(rows, found, strict=True) for key in digests(row_keys))
    _insert(pairs, using or _alias())


def digests(keys: Iterable[str]) -> list[str]:
    """What the index stores for `keys`, in the order `add` inserts them."""
    return [digest(key) for key in sorted(keys)]


def insert_for_new_row(connection: Any, new_row: str, id_column: str) -> str:
    """PostgreSQL: the INSERT of one new row's keys inside the statement that inserts the
    row (`services.inserting`), its id read from `id_column` of the `WITH` query named
    `new_row`; its one parameter is the row's `digests`, as an array. The row and its
    keys are then one statement: stored together or not at all, in one round trip."""
    quote = connection.ops.quote_name
    # Only quoted model metadata and the caller's names go into the text; values are parameters.
    return (
        f"INSERT INTO {quote(AddressKey._meta.db_table)} ({quote('key')}, {quote('notification_id')}) "  # noqa: S608
        f"SELECT given.digest, {new_row}.{id_column} FROM {new_row}, UNNEST(%s::text[]) AS given(digest)"
    )


def rewrite(rows: Sequence[Any], using: str | None = None) -> None:
    """Index `rows` (stored, and saved just now) afresh: their keys as they are in memory."""
    if not rows:
        return
    using = using or _alias()
    pks = [row.pk for row in rows]
    for start in range(0, len(pks), PAIRS_PER_STATEMENT):
        AddressKey.objects.using(using).filter(notification_id__in=pks[start : start + PAIRS_PER_STATEMENT]).delete()
    _insert(_pairs(rows), using)


def rows_naming(keys: Iterable[str]) -> models.QuerySet[AddressKey, Any]:
    """The ids of the rows that name any of `keys` (`.values` of `notification_id`), by the index."""
    return AddressKey.objects.filter(key__in=[digest(key) for key in keys]).values("notification_id")


def forget(keys: Iterable[str]) -> int:
    """Delete every entry of `keys` (an erased person: nothing left names them)."""
    return int(AddressKey.objects.filter(key__in=[digest(key) for key in keys]).delete()[0])


def index_all(using: str | None = None, *, model: Any = None, key_model: Any = None) -> int:
    """Index every row afresh (the migration's backfill; after rows were written around the
    app); returns how many rows. `model`, `key_model`: the migration's historical models."""
    model = model or _notification()
    key_model = key_model or AddressKey
    using = using or _alias()
    columns = ("pk", "recipient", *LISTED, *WRITTEN, "headers", "pending_recipients")
    done, last = 0, None
    while True:
        query = model._default_manager.using(using).order_by("pk")
        if last is not None:
            query = query.filter(pk__gt=last)
        chunk = [_Columns(dict(zip(columns, values, strict=True))) for values in query.values_list(*columns)[:CHUNK]]
        if not chunk:
            return done
        with transaction.atomic(using=using):
            key_model._default_manager.using(using).filter(notification_id__in=[r.pk for r in chunk]).delete()
            _insert(_pairs(chunk), using, key_model)
        done += len(chunk)
        last = chunk[-1].pk


class _Columns:
    """A row's values as attributes, for `keys_of`."""

    pk: Any

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _pairs(rows: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    for row in rows:
        for key in digests(keys_of(row)):
            yield key, row.pk


def _insert(pairs: Iterable[tuple[str, Any]], using: str, key_model: Any = None) -> None:
    """Multi-row INSERTs of (digest, row id): both plain values, nothing for the ORM to compile."""
    meta = (key_model or AddressKey)._meta
    connection = connections[using]
    quote = connection.ops.quote_name
    # Only quoted model metadata goes into the text; values are parameters.
    head = f"INSERT INTO {quote(meta.db_table)} ({quote('key')}, {quote('notification_id')}) VALUES "  # noqa: S608
    batch: list[tuple[str, Any]] = []
    with connection.cursor() as cursor:
        for pair in pairs:
            batch.append(pair)
            if len(batch) == PAIRS_PER_STATEMENT:
                cursor.execute(head + ", ".join(["(%s, %s)"] * len(batch)), [v for p in batch for v in p])
                batch = []
        if batch:
            cursor.execute(head + ", ".join(["(%s, %s)"] * len(batch)), [v for p in batch for v in p])


def _notification() -> Any:
    from django.apps import apps

    return apps.get_model("notifications", "Notification")


def _alias() -> str:
    return router.db_for_write(_notification()) or "default"
