"""`InboxChannel`: renders the firing's message and hands it to the write-back."""

from __future__ import annotations

from typing import Any

from notifications.channels.base import Channel, ChannelResult, ChannelRules, ErrorClass, Firing
from notifications.channels.inbox.rules import InboxRules, message
from notifications.content.templating import TemplateRenderError


class InboxChannel(InboxRules, Channel):
    """Delivers by handing the message back on its result (`ChannelResult.inserts`): the
    write-back inserts it with the firing's outcome, in one transaction, so a tick killed
    before its write-back leaves no message and the firing due again, and a firing written
    back twice (another tick after a lost lease) leaves one (its (row, firing) is unique)."""

    @classmethod
    def stateless(cls, name: str, options: dict[str, Any]) -> ChannelRules:
        rules = InboxRules()
        rules.name = name
        return rules

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        if not row.recipient:  # a row that reached the table around validation
            return ChannelResult(self.name, "inbox: the row has no recipient", ErrorClass.PERMANENT)
        try:
            found = message(row, firing.firing_id, firing.fired_at)
        except TemplateRenderError as exc:
            # The same template fails the same way next time: no retry can help.
            return ChannelResult(self.name, f"inbox: template error: {exc}", ErrorClass.PERMANENT)
        return ChannelResult(self.name, inserts=(found,), sent_to=row.recipient, summary=found.title)
