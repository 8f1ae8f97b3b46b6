"""The app's models: the queue (`Notification`), its delivery log, flow control and suppressions.

- `notification`: `Notification`, the queue itself, and its QuerySet.
- `states`: where a row stands, each state defined once for the database and in memory.
- `validation`: the field rules every save runs.
- `addresses`, `fields`: the model fields of the app's own.
- `attachments`: a row's attachments, their content kept through Django's storage API.
- `log`: `DeliveryAttempt`, `TickRun` and `Tally` (the monitoring totals).
- `flow`: `Target` (a circuit breaker) and `RateBucket` (a rate limit's tokens).
- `recipients`: `Preference` (a recipient's choice per category and channel) and
  `ThrottleWindow` (a throttled category's firings per recipient).
- `suppression`: `Suppression`, addresses email is no longer sent to, and `SuppressionLift`.
- `inbox`: `InboxMessage`, a message in a person's inbox inside the site.
- `tasks`: `TaskRun`, a `django.tasks` task's record beside its queue row.
- `tokens`: the HTTP API's `ApiToken` and `IdempotencyRecord`.
- `address_keys`: `AddressKey`, who a row names, by index (how erasure finds a person).
"""

from notifications.models.address_keys import AddressKey
from notifications.models.flow import RateBucket, Target
from notifications.models.inbox import InboxMessage
from notifications.models.log import DeliveryAttempt, Tally, TickRun
from notifications.models.notification import (
    DEFAULT_QUEUE,
    USER_FIELDS,
    Notification,
    NotificationQuerySet,
    Priority,
    Routing,
    attachment_files,
    default_channels,
    default_timezone,
)
from notifications.models.recipients import Preference, ThrottleWindow
from notifications.models.states import State
from notifications.models.suppression import Suppression, SuppressionLift
from notifications.models.tasks import TaskRun
from notifications.models.tokens import ApiToken, IdempotencyRecord

__all__ = [
    "DEFAULT_QUEUE",
    "USER_FIELDS",
    "AddressKey",
    "ApiToken",
    "DeliveryAttempt",
    "IdempotencyRecord",
    "InboxMessage",
    "Notification",
    "NotificationQuerySet",
    "Preference",
    "Priority",
    "RateBucket",
    "Routing",
    "State",
    "Suppression",
    "SuppressionLift",
    "Tally",
    "Target",
    "TaskRun",
    "ThrottleWindow",
    "TickRun",
    "attachment_files",
    "default_channels",
    "default_timezone",
]
