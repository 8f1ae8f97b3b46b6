"""A site channel that cannot be used: its class cannot be imported, is no channel, or cannot
be constructed with its OPTIONS (`registry.construct`). Its own module, apart from the
contract: it reads the models (the rows it holds), which the tick's workers never import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q

from notifications.channels.base import Channel, ChannelResult, ErrorClass, Firing, SettingHold
from notifications.models import states

if TYPE_CHECKING:
    from notifications.conf import TickSettings
    from notifications.models import Notification


class BrokenChannel(Channel):
    """Stands in for a site channel whose class cannot be loaded or constructed
    (notifications.W030, W031): its rows are held (nothing sent, no retry spent) while every
    other channel's go out, and fixing the setting releases them. `manage.py check` says why."""

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        return self.problem

    def setting_holds(self) -> list[SettingHold]:
        rows = Q(states.sends_on(self.name), next_fire_at__isnull=False, paused_at__isnull=True)
        hold = SettingHold(
            self.problem,
            rows,
            headline=f"Rows of the channel {self.name!r} are held: {self.problem.removeprefix(f'{self.name}: ')}",
            remedy=f"(no retry is spent): fix NOTIFICATIONS_CHANNELS[{self.name!r}] (manage.py check says how) "
            "and the next tick sends them.",
        )
        return [hold]

    @property
    def problem(self) -> str:
        """`sms: cannot be loaded (...)`: the registry's reason, which never holds an OPTIONS value."""
        return f"{self.name}: cannot be loaded ({self.options.get('problem', 'misconfigured')})"

    def deliver(self, firing: Firing) -> ChannelResult:
        # Reached only by a row the hold missed (the class broke between the hold and the send).
        problem = self.problem.removeprefix(f"{self.name}: ")
        return ChannelResult(self.name, error=f"{self.name}: internal: {problem}", error_class=ErrorClass.TRANSIENT)
