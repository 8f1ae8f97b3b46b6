"""The signed-in user's inbox on the web: the page, the JSON endpoints, the badge's counts.

- `recipient`: who the request is (NOTIFICATIONS_INBOX_RECIPIENT).
- `views`: `inbox/` (the page), `inbox/counts`, `inbox/messages`, `inbox/mark`.
- `cursor`: the opaque, signed position of `inbox/messages`' next page.
- `cors`: cross-origin front ends (NOTIFICATIONS_INBOX_ALLOWED_ORIGINS) and the POSTs they may send.
- `links`: which of a message's `url`s the page shows as a link.
- `checks`: the settings' system checks (W051-W053).

Everything a request reads or changes goes through `notifications.inbox`
(`messages`, `counts`, `mark`) for the request's own recipient, never another's.
"""
