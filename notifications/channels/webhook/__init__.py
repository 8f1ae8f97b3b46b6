"""The webhook channel: a signed JSON POST under a total deadline.

- `channel`: `WebhookChannel`, from a row to a request and from a response to a result.
- `transport`: the total deadline on top of requests, and the connection to a checked address.
- `guard`: where a webhook may connect (name resolution and the address checks).
"""
