"""The email channel: Django's mail API and the site's backends.

- `channel`: `EmailChannel`, from a row to a message and from a send to a result.
- `providers`: what mail servers and providers answer, classed.
- `mailers`: the site's mail backends and how long they may wait.
"""
