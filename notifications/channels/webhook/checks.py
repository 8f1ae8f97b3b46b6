"""The webhook channel's own system checks (`WebhookAnswers.check`): the site's signing keys
(E009, E010, W010) and the networks webhooks may reach (E011, E012)."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.core import checks

from notifications.conf import (
    app_settings,
)
from notifications.rules.secrets import secret_errors


def check_secrets() -> list[checks.CheckMessage]:
    secret = app_settings.WEBHOOK_SECRET
    # None: `os.environ.get("NOTIFICATIONS_WEBHOOK_SECRET")` without its variable; no key, as "" is.
    secrets = [secret] if isinstance(secret, str) else [] if secret is None else secret
    if not isinstance(secrets, (list, tuple)) or not all(isinstance(s, str) for s in secrets):
        return [
            checks.Error(
                f"NOTIFICATIONS_WEBHOOK_SECRET must be a string or a list of strings, not {type(secret).__name__}.",
                hint='For example "whsec_..." or, while rotating, ["whsec_new...", "whsec_old..."].',
                id="notifications.E009",
            )
        ]
    for position, value in enumerate(s for s in secrets if s):
        problems = secret_errors(value)
        if problems:
            # Never echo the secret itself: check output ends up in CI logs.
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_SECRET (key {position + 1}) is malformed: {problems[0]}",
                    hint=KEY_HINT,
                    id="notifications.E010",
                )
            ]
    if not any(secrets) and hasattr(settings, "NOTIFICATIONS_WEBHOOK_SECRET"):
        # Set, so the site means to send webhooks, but empty (often `NOTIFICATIONS_WEBHOOK_SECRET=`
        # in an environment file): nothing can be signed with the site's key. A warning, not an
        # error: the tick holds those rows and sends the rest, and `migrate`, `test` or
        # `runserver` in a shell without the environment file have nothing to sign.
        return [
            checks.Warning(
                "NOTIFICATIONS_WEBHOOK_SECRET holds no key (its environment variable unset or blank?): webhooks "
                "without a webhook_secret of their own cannot be signed, and are held (no retry spent) until a key "
                "is set.",
                hint=f"Set a key, or remove the setting if every webhook row carries its own. {KEY_HINT}",
                id="notifications.W010",
            )
        ]
    return []


KEY_HINT = (
    "Generate one with: python -c \"import base64, os; print('whsec_' + base64.b64encode(os.urandom(32)).decode())\""
)


def check_networks() -> list[checks.CheckMessage]:
    networks = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(networks, str) or not isinstance(networks, (list, tuple)):
        return [
            checks.Error(
                f"NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS must be a list of CIDRs, not {networks!r}.",
                hint='For example ["127.0.0.0/8", "::1/128"] on a development machine.',
                id="notifications.E011",
            )
        ]
    for value in networks:
        try:
            ipaddress.ip_network(value, strict=False)
        except (ValueError, TypeError):
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS holds {value!r}, which is not a CIDR.",
                    hint='For example "10.0.0.0/8".',
                    id="notifications.E012",
                )
            ]
    return []
