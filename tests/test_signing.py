"""Standard Webhooks signatures: the specification's known answer and real deliveries.

The known-answer vector is the one the Standard Webhooks reference libraries test
against (standard-webhooks/standard-webhooks, libraries/python/tests/test_webhooks.py,
`test_sign_function`).
"""

from __future__ import annotations

import base64
import json

import pytest
from django.test import override_settings
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from notifications.api import run_tick
from notifications.models import Notification
from notifications.rules import signing
from tests.support import vectors

ROW_SECRET = "whsec_" + base64.b64encode(b"a row's own key, 32 bytes long!!").decode()


def test_signature_matches_the_standard_webhooks_known_answer():
    key = signing.secret_key(vectors.SECRET)

    assert signing.signature(key, vectors.MSG_ID, vectors.TIMESTAMP, vectors.BODY) == vectors.SIGNATURE


def test_secret_without_prefix_gives_the_same_key():
    assert signing.secret_key(vectors.SECRET.removeprefix("whsec_")) == signing.secret_key(vectors.SECRET)


def test_headers_carry_id_timestamp_and_the_signature():
    headers = signing.headers([signing.secret_key(vectors.SECRET)], vectors.MSG_ID, vectors.TIMESTAMP, vectors.BODY)

    assert headers == {
        "webhook-id": vectors.MSG_ID,
        "webhook-timestamp": str(vectors.TIMESTAMP),
        "webhook-signature": vectors.SIGNATURE,
    }


def test_rotation_signs_with_every_key_and_either_verifies():
    old = signing.secret_key(vectors.SECRET)
    new = signing.secret_key(ROW_SECRET)

    header = signing.signature_header([new, old], vectors.MSG_ID, vectors.TIMESTAMP, vectors.BODY)

    assert header.split(" ") == [
        signing.signature(new, vectors.MSG_ID, vectors.TIMESTAMP, vectors.BODY),
        vectors.SIGNATURE,
    ]


def _verify(secret: str, received) -> dict:
    """What a receiver does: the reference library checks id, timestamp and signature."""
    return Webhook(secret).verify(received.body, received.headers)


def test_delivered_webhook_verifies_with_the_site_secret(make_row, webhook_server, settings):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"order": 7})

    run_tick()

    (received,) = webhook_server.received
    assert _verify(settings.NOTIFICATIONS_WEBHOOK_SECRET, received)["payload"] == {"order": 7}
    assert received.headers["webhook-id"] == f"msg_{row.firing_id}"
    with pytest.raises(WebhookVerificationError):
        _verify(ROW_SECRET, received)


def test_delivered_webhook_verifies_with_the_rows_own_secret(make_row, webhook_server, settings):
    make_row(channels=["webhook"], webhook_url=webhook_server.url(), webhook_secret=ROW_SECRET)

    run_tick()

    (received,) = webhook_server.received
    assert _verify(ROW_SECRET, received)["type"] == "notification.fired"
    # The row's secret replaces the site's: a receiver holding only the site key rejects it.
    with pytest.raises(WebhookVerificationError):
        _verify(settings.NOTIFICATIONS_WEBHOOK_SECRET, received)


def test_tampered_body_does_not_verify(make_row, webhook_server, settings):
    make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"amount": 1})

    run_tick()

    (received,) = webhook_server.received
    forged = json.loads(received.body)
    forged["payload"]["amount"] = 1000
    with pytest.raises(WebhookVerificationError):
        Webhook(settings.NOTIFICATIONS_WEBHOOK_SECRET).verify(json.dumps(forged), received.headers)


def test_site_key_rotation_delivery_verifies_with_old_and_new_key(make_row, webhook_server):
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=[ROW_SECRET, vectors.SECRET]):
        make_row(channels=["webhook"], webhook_url=webhook_server.url())
        run_tick()

    (received,) = webhook_server.received
    assert len(received.headers["webhook-signature"].split(" ")) == 2
    for secret in (ROW_SECRET, vectors.SECRET):
        assert _verify(secret, received)["type"] == "notification.fired"
    assert Notification.objects.count() == 0


def test_signature_never_leaks_the_secret(make_row, webhook_server, settings):
    make_row(channels=["webhook"], webhook_url=webhook_server.url())

    run_tick()

    (received,) = webhook_server.received
    everything = received.body.decode() + json.dumps(received.headers)
    key_text = settings.NOTIFICATIONS_WEBHOOK_SECRET.removeprefix("whsec_")
    assert key_text not in everything
