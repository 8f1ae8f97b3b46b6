"""HTTP plumbing the channels share, no channel of its own: where a request may connect and
the total deadline it runs under.

- `guard`: name resolution and the address checks (loopback, private and the rest
  refused unless NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS opens them).
- `transport`: the deadline on top of requests, connecting only to checked addresses.
- `curl`: the same two rules over libcurl, the cheaper client the webhook channel uses.
- `statuses`: what an HTTP answer's status says about trying again.

The webhook channel posts through it; Apprise's HTTP services are routed through it;
email providers' HTTP APIs are classified by its status rules.
"""
