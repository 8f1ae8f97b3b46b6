"""What saving a row asks of a channel: is the row right for it (`RowAnswers`).

Asked through `notifications.channels.validation` whenever a row is saved (the API, the
admin, forms) and by the tick's screening of rows that reached the table some other way.
Pure answers about one row: no connection, no thread, no database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

if TYPE_CHECKING:
    from django.db.models import Q

    from notifications.models import Notification


class RowAnswers:
    """A site channel writes `validate` (its `channel_data` entry) and nothing else here."""

    name: str = ""
    # A row naming this channel may carry attachments (`schedule(attachments=...)`).
    takes_attachments: bool = False
    # Its `row_errors` bounds the row's `body` itself (a queued email's may be longer than
    # the core's limit of a template body); otherwise the core's limit applies.
    bounds_body: bool = False
    # A name the hints of an invalid row offer (`Unknown channel(s): 'sms'. Use ...`): False
    # for a channel only the app's own code writes (`task`, by `notifications.tasks`).
    offered: bool = True

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

    def escalation_cancelled(self) -> Q | None:
        """The rows waiting as an escalation (`Notification.escalation_of`) whose escalation
        this channel's delivery cancelled (its message reached `escalate_unless`), as a
        filter the claim leaves out and the tick settles: None, for a channel that delivers
        nothing an escalation waits on."""
        return None

    def unnamed_errors(self, row: Notification) -> dict[str, list[str]]:
        """What is wrong with this channel's own fields on a row that does not name it (a
        value given anyway must still be one the channel could send to), by field."""
        return {}

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        """What the site's settings refuse in `row`'s fields of this channel, named or not:
        checked on every save, not again by the tick (a setting changed since is the send's
        outcome)."""
        return {}
