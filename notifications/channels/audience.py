"""What recipients and their preferences ask of a channel (`Audience`): the words a person
reads for it (the preference centre), whose choices decide whether it sends a row
(`notifications.flow.recipients`), and whether it reports recipients one by one
(`notifications.outcomes.settling`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notifications.models import Notification


class Audience:
    # What a person reads for the channel (the preference centre), translated: `_("Email")`.
    # A site's channel takes it from its NOTIFICATIONS_CHANNELS entry's "LABEL"; without
    # either, the name, capitalised (`notifications.channels.registry.label`).
    label: Any = None
    # Its results name recipients the receiver deferred while it took the message for
    # others (`ChannelResult.deferred`): the firing then owes this channel those alone
    # (`Notification.pending_recipients`). Email's SMTP greylisting.
    tracks_recipients: bool = False
    # It sends to people, who may choose it per category (the preference centre). False for
    # a channel no person receives (`task` runs the site's own code).
    reaches_people: bool = True

    def recipient_keys(self, row: Notification) -> list[str]:
        """Whose preferences decide whether this channel sends `row`
        (`notifications.flow.recipients`): the row's `recipient`, or nobody's."""
        return [row.recipient] if row.recipient else []
