"""System checks for the app's settings and surroundings, reported by `manage.py check`.

Ids are stable and documented in docs/checks.md: E0xx are errors, values wrong in
themselves that stop `check`, `migrate` and the tick; W0xx are warnings about setups that
work but will surprise. A setting only some rows need (a webhook key, the attachments'
storage, a mailer, a site channel's class) is a warning, never an error: the tick holds
those rows (`Channel.held`, no retry spent) and sends the rest. A retired E id keeps its
number as a W id. A bad value is reported here rather than by a crash mid-tick.

One module a topic: `numbers` (the tick's own settings), `settings` (names the app does
not know), `site_channels` (NOTIFICATIONS_CHANNELS), `recipients`, `database`,
`scheduler`, `health` (`check --database`), `api` (the HTTP API's extra); what is one channel's (the webhook's keys and
networks, the email's mailer, timeouts and attachments) is that channel's own
`ChannelAnswers.check`, run by `notifications.channels.checks`.

| id   | what |
|------|------|
| E001 | TICK_LIMIT is not a positive integer |
| E002 | MAX_RETRIES is not a positive integer |
| E003 | CHANNEL_TIMEOUT is not a positive number |
| E004 | TICK_BUDGET is not a positive number |
| E005 | CONCURRENCY is not a positive integer |
| E006 | BACKOFF is not a non-empty list of positive seconds |
| E007 | LEASE is not a positive number |
| E008 | LEASE is not longer than TICK_BUDGET + CHANNEL_TIMEOUT |
| E009 | WEBHOOK_SECRET is not a string or a list of strings |
| E010 | WEBHOOK_SECRET is malformed |
| E011 | WEBHOOK_ALLOWED_NETWORKS is not a list |
| E012 | WEBHOOK_ALLOWED_NETWORKS holds something that is not a CIDR |
| E013 | RESPONSE_BODY_LIMIT is not a positive integer |
| E014 | ATTEMPT_RETENTION_DAYS is not a positive number |
| E015 | MAX_CLOCK_OFFSET is not a positive number |
| E016 | MAX_PAYLOAD_BYTES is not a positive integer |
| E017 | QUIET_HOURS is not blank or "HH:MM-HH:MM" |
| E018 | TARGET_CONCURRENCY is not a positive integer |
| E019 | CIRCUIT_BREAKER is not a dict of failures, cooldown and max_cooldown |
| E020 | RATE_LIMITS is not a dict of target -> "N/s,N/m,N/h,N/d" |
| E021 | (retired: now W010, a warning) |
| E022 | (retired: now W022, a warning) |
| E023 | MAX_ATTACHMENT_BYTES is not a positive integer |
| E024 | (retired: now W024, a warning) |
| E025 | LOW_PRIORITY_AGING is not a positive number |
| E026 | the queue's MariaDB/MySQL server has no SKIP LOCKED (MariaDB < 10.6, MySQL < 8.0.11) (database check) |
| E027 | (retired: now W027, a warning) |
| E028 | (retired: now W028, a warning) |
| E029 | ATTACHMENT_BYTES_IN_FLIGHT is not a positive integer |
| E030 | (retired: now W030, a warning) |
| E031 | (retired: now W031, a warning) |
| E032 | a CHANNELS name is a built-in channel's (email, webhook, inbox) |
| E033 | CHANNELS is not a dict of name -> {"BACKEND", "OPTIONS", ...} (a bad name, OPTIONS not a dict, a bad TIMEOUT) |
| E034 | METRICS_TOKEN is not a string of printable ASCII without spaces around it |
| E040 | CATEGORIES is not a dict of category -> {"label", "default", "throttle", "channels"} |
| E041 | (retired: now W041, a warning) |
| E042 | UNSUBSCRIBE_MAILTO is not an email address |
| E035 | DIGEST_MAX_ITEMS is not a positive integer |
| W001 | BACKOFF has fewer steps than MAX_RETRIES - 1 |
| W002 | the SMTP backend is in use and its timeout (EMAIL_TIMEOUT, or the default mailer's) is unset |
| W003 | django_crontab is installed but there is no `crontab` binary |
| W004 | SQLite without WAL while ticks are expected to overlap |
| W005 | a NOTIFICATIONS_* setting the app does not know (a typo?) |
| W006 | that timeout, or django-anymail's REQUESTS_TIMEOUT (30 s unless set), is longer than CHANNEL_TIMEOUT |
| W007 | MariaDB/MySQL at an isolation level stronger than READ COMMITTED |
| W008 | MariaDB/MySQL connected with the 3-byte `utf8` character set, not `utf8mb4` |
| W009 | a queue table on MariaDB/MySQL in a non-transactional engine such as MyISAM (database check) |
| W010 | WEBHOOK_SECRET is set but holds no key, or is None (webhooks without a secret of their own are held) |
| W022 | the tick would send email through the queue itself, or through an alias that names no mailer (email held) |
| W024 | ATTACHMENT_STORAGE names no storage in STORAGES (email with attachments held) |
| W027 | the tick's email backend (or a NOTIFICATIONS_MAILERS alias's) names no email backend class (email held) |
| W028 | attachments are kept in a file storage whose location is relative or unset (email with attachments held) |
| W030 | a CHANNELS BACKEND cannot be imported (that channel's rows held) |
| W031 | a CHANNELS BACKEND is not a subclass of notifications.channels.Channel (that channel's rows held) |
| W040 | a category's "channels" names no channel of the site |
| W041 | PUBLIC_URL builds no links (unset while CATEGORIES are, http, malformed): mail that needs them is held |
| W043 | PUBLIC_URL is http://localhost or http://127.0.0.1, accepted while DEBUG is on |
| W050 | INBOX_RETENTION_DAYS is not a positive number (the inbox channel's check): the default 90 days apply |
| W051 | INBOX_ALLOWED_ORIGINS holds an entry that is no https:// origin as browsers send it: it allows nothing |
| W052 | INBOX_RECIPIENT names no importable function: the inbox's page and endpoints fail |
| W053 | INBOX_POLL_SECONDS is not a positive number up to a day: the badge asks every 30 s |
| W060 | an API_* setting is set but django-ninja is not installed: the HTTP API is not mounted |
| W100 | no tick has finished lately (database check) |
| W101 | a host's clock is further than MAX_CLOCK_OFFSET from the database's (database check) |

A number above its bound (`notifications.conf.MAXIMUMS`: more than a datetime, a column or a
tick can hold) is reported by its setting's id as any other invalid value is.
"""

from notifications.checks import (  # noqa: F401 - importing a module registers its checks
    api,
    database,
    health,
    numbers,
    recipients,
    scheduler,
    settings,
    site_channels,
)
