"""`NotificationsError`: the one base of the exceptions the app raises, so host code can
catch any of them in one `except`.

    from notifications.exceptions import NotificationsError

Each class also keeps the built-in base it always had (`InvalidRule` is a `ValueError`,
`ResolutionTimeout` a `TimeoutError`), so existing `except` clauses keep working:

- `notifications.receiving.InvalidWebhook`: a webhook that fails verification.
- `notifications.rules.schedule.InvalidRule`: a cron expression, RRULE or time zone that cannot be read.
- `notifications.content.templating.TemplateRenderError`: a notification template that cannot be rendered.
- `notifications.channels.http.guard.BlockedAddress`: a target the address guard refuses.
- `notifications.channels.http.guard.ResolutionTimeout`: a name that did not resolve in time.
- `notifications.channels.email.channel.AttachmentMissing`: an attachment's file gone from storage.

Validation errors stay Django's `ValidationError`, as forms and the admin expect.
"""

from __future__ import annotations


class NotificationsError(Exception):
    """Base class of every exception the notifications app defines."""
