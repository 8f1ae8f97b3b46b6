"""`schedule_many`: many rows at once, all or none, in multi-row INSERTs.

Each row is validated as `schedule()` validates it (`creating.prepare`), every row before
anything is written, and errors are reported together, each under `"<index>.<field>"`.
Keys behave as a run of `schedule()` calls in the list's order would, within the batch
too (`_plan`): with `on_conflict="error"` a key already held (by a stored row or by an
earlier row of the batch) is an error on that index's `key`; with `"replace"` the later
row wins whole (a stored row keeps its pk, as with `schedule()`); with `"keep"` the first
one is kept and returned for each index that named its key. A row's own `on_conflict`
(in its dict) overrides the batch's, as it would in its own `schedule()` call.

Written in one transaction: one SELECT of the keys already taken (only when rows have
keys), the new rows in multi-row INSERTs (`inserting.insert_many`: one statement for a
batch of thousands), one UPDATE per replaced row, and one wake-up of the fast lane for
the batch. A key taken or freed by a concurrent call between the look and the insert
rolls the attempt back and the batch is planned again, so the policy is applied to what
the database holds; a deadlock is tried again too, unless the caller's transaction
holds work of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, OperationalError, connections, transaction
from django.utils import timezone

from notifications.models import Notification, attachments, validation
from notifications.services import inserting, wake
from notifications.services.creating import KEY_ATTEMPTS, _replace_keyed, check_policy, check_stored, prepare


@dataclass
class Prepared:
    """One row of a batch, validated (`creating.prepare`): its policy and the attachments
    given for it (stored when the batch is saved)."""

    row: Notification
    given: list[Any] = field(default_factory=list)
    on_conflict: str = "error"


@dataclass
class _Slot:
    """What one key comes to: a new row, a stored row kept as it is, or a stored row replaced."""

    kind: str  # "new", "kept" or "replace"
    row: Notification
    given: list[Any] = field(default_factory=list)  # the attachments given for `row`
    indices: list[int] = field(default_factory=list)


class _KeyMoved(Exception):
    """A key was taken or freed by a concurrent call during the attempt: plan again."""


def schedule_many(rows: Iterable[Mapping[str, Any]], on_conflict: str = "error") -> list[Notification]:
    """Validate and save every row of `rows` (dicts of schedule()'s keyword arguments), or
    none; returns the saved rows in the same order. See the module for keys."""
    check_policy(on_conflict)
    if isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Iterable):
        raise TypeError(f"schedule_many() takes a list of dicts, not {type(rows).__name__}")
    return save_batch(_validated(list(rows), on_conflict))


def save_batch(batch: list[Prepared]) -> list[Notification]:
    """Save validated rows (`Prepared`), all or none; returns them as saved, in order."""
    if not batch:
        return []
    own_transaction = not connections[inserting.alias()].in_atomic_block
    for _ in range(KEY_ATTEMPTS):
        try:
            saved = _attempt(batch)
        except _KeyMoved:
            continue
        except OperationalError as exc:
            if own_transaction and inserting.is_retryable(exc):
                continue
            raise
        due = [row.next_fire_at for row in saved if row.next_fire_at is not None]
        if due:
            wake.announce_due(min(due))  # one wake-up for the batch
        return saved
    raise RuntimeError("schedule_many(): keys of the batch kept changing hands; try again")


def _validated(rows: Sequence[Mapping[str, Any]], on_conflict: str) -> list[Prepared]:
    """Every row validated before anything is written; all their errors in one ValidationError."""
    now = timezone.now()
    batch: list[Prepared] = []
    errors: dict[str, list[ValidationError]] = {}
    keys: set[str] = set()
    with validation.batch():  # settings read, and a URL the rows repeat parsed, once
        for index, given in enumerate(rows):
            if not isinstance(given, Mapping):
                raise TypeError(f"schedule_many(): rows[{index}] is a {type(given).__name__}, not a dict")
            fields = dict(given)
            policy = fields.pop("on_conflict", on_conflict)
            try:
                check_policy(policy)
                row, files = prepare(
                    fire_at=fields.pop("fire_at", None), key=fields.pop("key", ""), fields=fields, now=now
                )
            except ValidationError as exc:
                for name, messages in _by_field(exc).items():
                    errors[f"{index}.{name}"] = messages
                continue
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"schedule_many(): rows[{index}]: {exc}") from exc
            if row.key and policy == "error" and row.key in keys:  # known without asking the database
                errors[f"{index}.key"] = [ValidationError(validation.KEY_TAKEN, code="unique")]
            keys.add(row.key)
            batch.append(Prepared(row, files, policy))
    if errors:
        raise ValidationError(errors)
    return batch


def _by_field(exc: ValidationError) -> dict[str, list[ValidationError]]:
    if hasattr(exc, "error_dict"):
        return dict(exc.error_dict)
    return {NON_FIELD_ERRORS: exc.error_list}


def _attempt(batch: list[Prepared]) -> list[Notification]:
    """One try at saving the batch in one transaction (a savepoint inside the caller's).

    A batch without keys that one INSERT holds needs none: that statement is all or
    nothing by itself.
    """
    stored: list[dict[str, Any]] = []
    for item in batch:  # unsaved again: an attempt rolled back may have given them pks
        item.row.pk = None
        item.row._state.adding = True
    keys = sorted({item.row.key for item in batch if item.row.key})
    alone = not keys and inserting.fits_one_statement([item.row for item in batch])
    try:
        with contextlib.nullcontext() if alone else transaction.atomic(using=inserting.alias()):
            taken = {row.key: row for row in Notification.objects.filter(key__in=keys).order_by()} if keys else {}
            slots, results = _plan(batch, taken)
            written = [slot for slot in slots if slot.kind != "kept"]
            for slot in written:
                stored += _store_attachments(slot.row, slot.given)
            _check_stored(written, batch)
            try:
                inserting.insert_many([slot.row for slot in written if slot.kind == "new"])
            except IntegrityError as exc:
                if inserting.is_key_violation(exc):
                    raise _KeyMoved from exc  # a concurrent call took a key since the look
                raise inserting.constraint_error(exc) from exc
            for slot in written:
                if slot.kind == "replace":
                    replaced = _replace_keyed(slot.row, announce=False)
                    if replaced is None:  # cancelled since the look: plan again
                        raise _KeyMoved
                    slot.row = replaced
    except BaseException:
        attachments.delete_files(stored, at_once=True)
        raise
    return [slot.row for slot in results]


def _store_attachments(row: Notification, given: list[Any]) -> list[dict[str, Any]]:
    """Store the attachments given for `row` on it; the files this stored (to delete on failure)."""
    row.attachments = attachments.store(given) if given else []
    return [item for item in row.attachments if not any(item is kept for kept in given)]


def _check_stored(written: list[_Slot], batch: list[Prepared]) -> None:
    """The stored attachments of the rows to write, as `check_stored` checks one row's;
    errors named by the index of the row that gave them."""
    errors: dict[str, list[ValidationError]] = {}
    for slot in written:
        try:
            check_stored(slot.row, slot.given)
        except ValidationError as exc:
            index = next(i for i, item in enumerate(batch) if item.row is slot.row)
            for name, messages in _by_field(exc).items():
                errors[f"{index}.{name}"] = messages
    if errors:
        raise ValidationError(errors)


def _plan(batch: list[Prepared], taken: dict[str, Notification]) -> tuple[list[_Slot], list[_Slot]]:
    """What a run of schedule() calls in the batch's order would do, given the stored rows
    holding its keys (`taken`): the slots to write, in order, and each index's slot.

    Raises ValidationError (`"<index>.key"`) for each key an "error" row finds held.
    """
    slots: list[_Slot] = []
    results: list[_Slot] = []
    by_key: dict[str, _Slot] = {}
    errors: dict[str, list[ValidationError]] = {}
    for index, item in enumerate(batch):
        row, key = item.row, item.row.key
        slot = by_key.get(key) if key else None
        if slot is None and key in taken:
            slot = by_key[key] = _Slot("kept", taken[key])
            slots.append(slot)
        if slot is None:
            slot = _Slot("new", row, item.given)
            slots.append(slot)
            if key:
                by_key[key] = slot
        elif item.on_conflict == "error":
            errors[f"{index}.key"] = [ValidationError(validation.KEY_TAKEN, code="unique")]
            results.append(slot)
            continue
        elif item.on_conflict == "replace":
            slot.row, slot.given = row, item.given  # the later row wins whole; a stored one keeps its pk
            if slot.kind == "kept":
                slot.kind = "replace"
        slot.indices.append(index)
        results.append(slot)
    if errors:
        raise ValidationError(errors)
    return slots, results
