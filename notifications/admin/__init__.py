"""The operator's console in the Django admin.

- `notification`: the Notifications list and change page (`NotificationAdmin`).
- `filters`, `status`, `display`: its list filters, the state and reason columns, formats.
- `forms`: the edit form (the same rules as `schedule()`, a write-only secret).
- `log`: the delivery history and the tick runs.
- `targets`, `suppressions`: the Targets and Suppressions lists.
- `tokens`: the HTTP API's tokens, listed and revoked.
- `recipients`: the Preferences list and the action that erases a person.
- `inbox`: the inbox's messages, read-only, by recipient, category and state.
- `base`: the one `ModelAdmin` base of them all.
"""

from notifications.admin import inbox, log, notification, recipients, suppressions, targets, tokens  # noqa: F401 - each registers its admin
