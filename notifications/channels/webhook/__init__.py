"""The webhook channel: a signed JSON POST under a total deadline.

- `channel`: `WebhookChannel`, from a row to a request and from a response to a result.
- `holds`: rows held while the site has no key to sign with.
- `display`: how the admin shows a webhook's destination.

The address guard and the deadline-bound transport it sends through are shared HTTP
plumbing (`notifications.channels.http`), importable from here as before.
"""

from notifications.channels.http import guard, transport

__all__ = ["guard", "transport"]
