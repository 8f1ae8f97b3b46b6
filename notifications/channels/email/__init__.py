"""The email channel: Django's mail API and the site's backends.

- `channel`: `EmailChannel`, from a row to a message and from a send to a result.
- `providers`: what mail servers and providers answer, classed.
- `timeouts`: how long the mailer the tick sends through may wait (checks W002, W006);
  which mailer that is, is `notifications.channels.email.mailers`'s.
"""
