"""The receiving-side helper: Standard Webhooks vectors, tolerance, rotation, the documented view."""

from __future__ import annotations

import base64
import hmac
import json
import textwrap
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks
from django.urls import path

from notifications import receiving
from notifications.api import run_tick, schedule
from notifications.receiving import InvalidWebhook, verify
from notifications.rules import signing
from tests.support.vectors import BODY, MSG_ID, SECRET, SIGNATURE, TIMESTAMP

OTHER = "whsec_" + base64.b64encode(b"another key, 32 bytes long......").decode()


def headers(signature: str = SIGNATURE, msg_id: str = MSG_ID, timestamp: int | str = TIMESTAMP) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": signature}


def test_the_specification_vector_verifies():
    assert verify(BODY, headers(), SECRET, now=TIMESTAMP) == {"test": 2432232314}


def test_headers_are_matched_case_insensitively():
    upper = {k.upper(): v for k, v in headers().items()}
    assert verify(BODY, upper, SECRET, now=TIMESTAMP) == {"test": 2432232314}


@pytest.mark.parametrize(
    ("body", "hdrs", "secret", "message"),
    [
        (BODY, headers(), OTHER, "no valid signature"),
        (b'{"test": 2432232315}', headers(), SECRET, "no valid signature"),
        (BODY, headers(msg_id="msg_other"), SECRET, "no valid signature"),
        (BODY, headers(timestamp=TIMESTAMP + 1), SECRET, "no valid signature"),
        (BODY, headers(signature="v1,AAAA"), SECRET, "no valid signature"),
        (BODY, headers(signature=SIGNATURE.replace("v1,", "v2,")), SECRET, "no valid signature"),
        (BODY, headers(signature=SIGNATURE[3:]), SECRET, "no valid signature"),
        (BODY, headers(timestamp="yesterday"), SECRET, "webhook-timestamp is not a number"),
        (BODY, {"webhook-timestamp": str(TIMESTAMP), "webhook-signature": SIGNATURE}, SECRET, "missing webhook-id"),
        (BODY, {"webhook-id": MSG_ID, "webhook-signature": SIGNATURE}, SECRET, "missing webhook-timestamp"),
        (BODY, {"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP)}, SECRET, "missing webhook-signature"),
    ],
)
def test_forgeries_are_refused(body, hdrs, secret, message):
    with pytest.raises(InvalidWebhook, match=message):
        verify(body, hdrs, secret, now=TIMESTAMP)


@pytest.mark.parametrize("offset", [-299, 0, 299, 300])
def test_timestamps_within_five_minutes_are_accepted(offset):
    assert verify(BODY, headers(), SECRET, now=TIMESTAMP + offset)


@pytest.mark.parametrize("offset", [-301, 301, 3600, -86400])
def test_replays_and_clock_skew_beyond_five_minutes_are_refused(offset):
    with pytest.raises(InvalidWebhook, match="outside the tolerance"):
        verify(BODY, headers(), SECRET, now=TIMESTAMP + offset)


def test_any_listed_key_may_match_and_any_offered_signature_may_match():
    assert verify(BODY, headers(), [OTHER, SECRET], now=TIMESTAMP)
    assert verify(BODY, headers(signature=f"v1,bm90IGl0 {SIGNATURE}"), SECRET, now=TIMESTAMP)
    assert verify(BODY, headers(signature=f"v1a,c29tZXRoaW5n {SIGNATURE}"), SECRET, now=TIMESTAMP)


def test_signatures_are_compared_in_constant_time(monkeypatch):
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(receiving.hmac, "compare_digest", spy)
    verify(BODY, headers(signature=f"v1,bm90IGl0 {SIGNATURE}"), [OTHER, SECRET], now=TIMESTAMP)
    # Every offered v1 signature against every key: no early exit reveals which matched.
    assert len(compared) == 4
    assert (SIGNATURE.encode(), SIGNATURE.encode()) in compared


@pytest.mark.parametrize("secrets", [[], "", "whsec_not base64!", ["whsec_%%%"]])
def test_an_unusable_secret_is_a_setup_error_not_a_bad_request(secrets):
    with pytest.raises(ValueError) as caught:
        verify(BODY, headers(), secrets, now=TIMESTAMP)
    assert not isinstance(caught.value, InvalidWebhook)
    assert "%%%" not in str(caught.value) and "not base64!" not in str(caught.value)


def test_non_json_bodies_are_refused_after_the_signature_checks():
    body = b"not json"
    sig = signing.signature(signing.secret_key(SECRET), MSG_ID, TIMESTAMP, body)
    with pytest.raises(InvalidWebhook, match="not JSON"):
        verify(body, headers(signature=sig), SECRET, now=TIMESTAMP)


@pytest.mark.parametrize("n", range(5))
def test_the_helper_and_standardwebhooks_agree(n):
    """Both directions on fresh vectors: what one signs the other verifies."""
    secret = "whsec_" + base64.b64encode(bytes(range(n, n + 32))).decode()
    msg_id, now = f"msg_{n}", int(time.time())
    body = json.dumps({"n": n, "text": "é ✓"}).encode()

    theirs = standardwebhooks.Webhook(secret).sign(msg_id, datetime.fromtimestamp(now, tz=UTC), body.decode())
    assert verify(body, headers(theirs, msg_id, now), secret) == {"n": n, "text": "é ✓"}

    ours = signing.signature_header([signing.secret_key(secret)], msg_id, now, body)
    assert ours == theirs
    standardwebhooks.Webhook(secret).verify(body, headers(ours, msg_id, now))


# --- against a real delivery, and the documented example view -----------------------------------


@pytest.mark.django_db
def test_a_delivered_webhook_verifies(webhook_server):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), payload={"k": "v"})
    run_tick()
    (received,) = webhook_server.received

    event = verify(received.body, received.headers, SECRET)

    assert (event["type"], event["notification_id"], event["payload"]) == ("notification.fired", row.pk, {"k": "v"})
    assert event["id"] == received.headers["webhook-id"]


def _example_view_source() -> str:
    """The example view exactly as `notifications.receiving` documents it."""
    doc = receiving.__doc__ or ""
    block = doc.split("An example Django view::", 1)[1].split("\nAnswer 2xx", 1)[0]
    return textwrap.dedent(block)


handled: list[tuple] = []
_example: dict = {"__name__": __name__, "handle": lambda *args: handled.append(args)}
exec(compile(_example_view_source(), "notifications/receiving.py (docstring)", "exec"), _example)
urlpatterns = [path("hooks/notifications/", _example["notification_hook"])]


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_the_documented_example_view_accepts_ours_and_refuses_forgeries(client, webhook_server):
    handled.clear()
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), payload={"k": "v"})
    run_tick()
    (received,) = webhook_server.received
    sent = {k: v for k, v in received.headers.items() if k.startswith("webhook-")}

    ok = client.post("/hooks/notifications/", received.body, content_type="application/json", headers=sent)
    forged = client.post(
        "/hooks/notifications/", received.body.replace(b'"v"', b'"w"'), content_type="application/json", headers=sent
    )
    unsigned = client.post("/hooks/notifications/", received.body, content_type="application/json")

    assert ok.status_code == 204
    assert handled == [(sent["webhook-id"], row.pk, {"k": "v"})]
    assert (forged.status_code, forged.content) == (400, b"no valid signature")
    assert (unsigned.status_code, unsigned.content) == (400, b"missing webhook-id header")
    assert client.get("/hooks/notifications/").status_code == 405
