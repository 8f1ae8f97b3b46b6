"""Email addresses of a row: `email_to` (one address or a list), `email_cc`, `email_bcc`, `reply_to`.

Stored as JSON: `email_to` keeps a single address as a string (rows written before it
took lists stay as they were) and several as a list; the others are always lists. In
forms they are one text box each, addresses separated by commas, semicolons or line
breaks. Every address is checked with Django's `validate_email`.

This module imports nothing from the app, so validation, the models and the email
channel share it.
"""

from __future__ import annotations

import contextlib
import re
from email.utils import getaddresses, parseaddr
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models

# Recipients of one firing at most, To, Cc and Bcc together: a reminder goes to a few
# people; a mailing list belongs in a mailing tool (and providers cap it near 50).
MAX_RECIPIENTS = 50

# What separates the addresses of a text box, outside quotes and angle brackets.
_SEPARATORS = frozenset(",;\r\n")

# Characters of an address the suppression list can hold: its column, and the most an SMTP
# path carries (RFC 5321: 256 octets with the angle brackets).
MAX_STORED_ADDRESS = 254


def normalise(address: str) -> str:
    """One spelling per mailbox, for the suppression list: the local part casefolded, the
    domain lowercased and IDNA-encoded as Django's mail code sends it (`exämple.com` and
    `EXÄMPLE.COM` are `xn--exmple-cua.com`), surrounding blanks and a trailing dot dropped.

    A domain that cannot be encoded is kept casefolded. Pure; never raises.
    """
    local, at, domain = address.strip().rpartition("@")
    if not at:
        return address.strip().casefold()
    domain = domain.rstrip(".").casefold()
    with contextlib.suppress(UnicodeError):  # not a name IDNA can encode: kept casefolded
        domain = domain.encode("idna").decode("ascii")
    return f"{local.casefold()}@{domain.lower()}"


def storable(address: str) -> str | None:
    """`normalise(address)` when the suppression list can store it; None when it cannot (too
    long for its column, blank, or holding a NUL or a lone surrogate)."""
    key = normalise(address)
    if not key or len(key) > MAX_STORED_ADDRESS or "\x00" in key:
        return None
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return key


def as_list(value: Any) -> list[str]:
    """The addresses of a stored value: a string is one address, a list many; blanks dropped."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str) and item.strip()]
    return []


def is_address(value: str) -> bool:
    """Whether `value` is one syntactically valid email address (Django's validator)."""
    try:
        validate_email(value)
    except ValidationError:
        return False
    return True


def errors(value: Any, *, single: bool, required: bool = False) -> list[str]:
    """Why `value` is not a valid address field; empty when it is.

    `single` fields (`email_to`) take one address as a string or a list; the others take
    a list only, as Django's EmailMessage does. An address may carry a display name
    (`Ada Lovelace <ada@example.com>`), as Django's EmailMessage takes it.
    """
    if value is None or value == "" or value == []:
        return ["The email channel needs a recipient."] if required else []
    if isinstance(value, str) and not single:
        return ['Give a list of addresses, e.g. ["ada@example.com"].']
    if not isinstance(value, str | list) or (isinstance(value, list) and not all(isinstance(a, str) for a in value)):
        return ["Give an address or a list of addresses."]
    addresses = [value] if isinstance(value, str) else value
    bad = []
    for address in addresses:
        if not is_valid(address):
            bad.append(address)
    if bad:
        shown = ", ".join(repr(a[:80]) for a in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        return [f"Enter a valid email address: {shown}." if len(bad) == 1 else f"Enter valid email addresses: {shown}."]
    if len(addresses) != len({bare(a) for a in addresses}):
        return ["Each address may appear only once."]
    return []


def is_valid(address: str) -> bool:
    """An address, bare or with a display name (`Ada <ada@example.com>`), on one line."""
    if any(c in address for c in "\r\n\x00"):
        return False
    spec = address
    if address.rstrip().endswith(">"):
        spec = parseaddr(address)[1]
        if not spec or "<" not in address:
            return False
    try:
        validate_email(spec)
    except ValidationError:
        return False
    return True


def mailbox(address: str) -> str:
    """The mailbox of `address` without its display name, as written: `Ada <Ada@Example.com>`
    is `Ada@Example.com`; a bare address (or text that is none) comes back as it is."""
    if address.rstrip().endswith(">"):
        spec = parseaddr(address)[1]
        if spec:
            return spec
    return address


def bare(address: str) -> str:
    """The mailbox of `address` without its display name, normalised (`normalise`):
    `Ada <Ada@Example.com>` is `ada@example.com`."""
    return normalise(mailbox(address))


def spellings(key: str) -> list[str]:
    """The ways text may write the normalised address `key`: as it is (an internationalised
    domain in punycode, as `normalise` spells it) and with its domain as typed (Unicode)."""
    local, at, domain = key.rpartition("@")
    found = [key]
    if at:
        with contextlib.suppress(UnicodeError):  # not punycode: the one spelling
            found.append(f"{local}@{domain.encode('ascii').decode('idna')}")
    return list(dict.fromkeys(found))


def names(value: Any, key: str) -> bool:
    """Whether the stored address field `value` holds the normalised address `key`, however
    spelt (case, display name, an internationalised domain as typed or as punycode)."""
    return any(bare(address) == key for address in as_list(value))


def without(value: Any, key: str) -> Any:
    """The stored address field `value` without the normalised address `key` (every spelling):
    a list stays a list, a single address that was `key` becomes blank."""
    if isinstance(value, str):
        return "" if names(value, key) else value
    if isinstance(value, list):
        return [item for item in value if not (isinstance(item, str) and bare(item) == key)]
    return value


def mentions(text: Any, key: str) -> bool:
    """Whether free text (a header's value, an error) names the normalised address `key`:
    as an address of its own (`Ada <ADA@Example.com>`) or written inside it, either spelling."""
    if not isinstance(text, str) or not text:
        return False
    if any(bare(address) == key for _, address in getaddresses([text]) if address):
        return True
    return _writing(key).search(text) is not None


def redact(text: str, key: str, mark: str = "<erased>") -> str:
    """`text` with every writing of the normalised address `key` (either spelling, any case)
    replaced by `mark`."""
    return _writing(key).sub(mark, text)


def _writing(key: str) -> re.Pattern[str]:
    """`key` written in text, either spelling, any case; not a part of a longer address
    (`ada@example.com` is not in `mada@example.com` or `ada@example.com.au`)."""
    either = "|".join(re.escape(spelling) for spelling in spellings(key))
    return re.compile(rf"(?<![\w.+-])(?:{either})(?![\w-]|\.\w)", re.IGNORECASE)


def split(text: str) -> list[str]:
    """The addresses of a text box, as typed: separated by commas, semicolons or line
    breaks, bare ones also by blanks; a display name keeps its blanks and a quoted one its
    commas (`Ada Lovelace <ada@example.com>, "Doe, John" <john@example.com>`). An
    unclosed quote or bracket runs to the end, for validation to refuse.

    One pass over the text (a regular expression retrying every unclosed quote took
    seconds on a hostile form field).
    """
    pieces: list[str] = []
    piece: list[str] = []
    closing = ""  # the quote or bracket the current piece waits for
    escaped = False
    for char in text:
        if closing:
            piece.append(char)
            if escaped:
                escaped = False
            elif char == "\\" and closing == '"':
                escaped = True
            elif char == closing:
                closing = ""
        elif char in _SEPARATORS:
            pieces.append("".join(piece))
            piece = []
        else:
            piece.append(char)
            closing = {'"': '"', "<": ">"}.get(char, "")
    pieces.append("".join(piece))
    found: list[str] = []
    for candidate in pieces:
        candidate = candidate.strip()
        if "<" in candidate or '"' in candidate:
            found.append(candidate)
        else:
            found += candidate.split()
    return [address for address in found if address]


def too_many(*values: Any) -> list[str]:
    """The recipient limit, To, Cc and Bcc together."""
    count = sum(len(as_list(v)) for v in values)
    if count > MAX_RECIPIENTS:
        return [f"At most {MAX_RECIPIENTS} recipients (To, Cc and Bcc together), not {count}."]
    return []


def compact(value: Any) -> str:
    """For a list column: the first address, and how many more (`ada@example.com +2`)."""
    addresses = as_list(value)
    if not addresses:
        return ""
    return addresses[0] + (f" +{len(addresses) - 1}" if len(addresses) > 1 else "")


# --- the model and form fields -------------------------------------------------------------


class AddressesFormField(forms.CharField):
    """One text box of addresses separated by commas, semicolons or line breaks."""

    def __init__(self, *, single: bool = False, encoder: Any = None, decoder: Any = None, **kwargs: Any) -> None:
        self.single = single
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 60}))
        kwargs.setdefault("help_text", "One address, or several separated by commas.")
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> Any:
        if isinstance(value, list):
            return value
        addresses = split(super().to_python(value) or "")
        if self.single and len(addresses) <= 1:
            return addresses[0] if addresses else ""
        return addresses

    def has_changed(self, initial: Any, data: Any) -> bool:
        return as_list(initial) != as_list(self.to_python(data))


class AddressesField(models.JSONField):
    """Addresses as JSON: a list, or (`single=True`, for `email_to`) also one string."""

    def __init__(self, *args: Any, single: bool = False, **kwargs: Any) -> None:
        self.single = single
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if self.single:
            kwargs["single"] = True
        return name, path, args, kwargs

    def formfield(self, form_class: Any = None, choices_form_class: Any = None, **kwargs: Any) -> Any:
        return super().formfield(form_class=form_class or AddressesFormField, single=self.single, **kwargs)
