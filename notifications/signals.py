"""Signals a host site can connect to, sent after a firing's outcome is written back.

Each is sent with `sender=Notification`, `notification` (the row as written; a deleted
one-shot keeps its field values but no longer exists), `results` (a list of
`notifications.channels.ChannelResult`, one per channel attempted) and `errors` (channel
-> its error, for the channels that failed: what a partial failure's `partial: webhook`
does not say, e.g. `{"webhook": "webhook: HTTP 503"}`). Receivers that raise are logged
and do not stop the tick.

`notification_expired` is sent when a firing came too late to be sent (`expires_at`,
`max_delay`), once per such firing; its `results` are those of the attempt that made a
retry pointless, or empty when nothing was attempted.

    from django.dispatch import receiver
    from notifications.signals import notification_dead_lettered

    @receiver(notification_dead_lettered)
    def page_someone(sender, notification, results, **kwargs): ...

`target_opened` and `target_closed` are sent with `sender=Target` and `target` (the
`notifications.models.Target` as written) when a target's circuit opens (after its
failure streak, or by hand) and when it closes again (a probe succeeded, or by hand).
A failed probe re-opens the circuit without sending `target_opened` again.
"""

from django.dispatch import Signal

notification_delivered = Signal()
notification_partially_delivered = Signal()
notification_dead_lettered = Signal()
notification_expired = Signal()
target_opened = Signal()
target_closed = Signal()
