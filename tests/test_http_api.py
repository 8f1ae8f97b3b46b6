"""The HTTP API (SPEC version 5) against a real server process: Django's live_server on a
loopback port, spoken to with `requests`; every answer held against the API's own
OpenAPI document (openapi-core)."""

from __future__ import annotations

import base64
import io
import json
import socket
from datetime import UTC, datetime, timedelta

import pytest
import requests
import time_machine
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone
from openapi_core import Config, OpenAPI
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse

from notifications.models import ApiToken, IdempotencyRecord, Notification
from notifications.services import tokens
from notifications.store import housekeeping

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = {"channels": ["webhook"], "webhook_url": "https://example.com/hook", "payload": {"n": 1}}


@pytest.fixture
def base(live_server):
    return f"{live_server.url}/notifications/api/v1"


@pytest.fixture
def document(base):
    # openapi-core reads JSON by its media type's name: problem details are JSON too.
    config = Config(extra_media_type_deserializers={"application/problem+json": json.loads})
    return OpenAPI.from_dict(requests.get(f"{base}/openapi.json", timeout=30).json(), config=config)


@pytest.fixture
def token():
    return tokens.create("all", ["schedule", "read", "manage"])[1]


class Client:
    """requests with a token, each answer checked against the document."""

    def __init__(self, base, document, token):
        self.base, self.document, self.token = base, document, token

    def __call__(self, method, path, body=None, headers=None, **kwargs):
        sent = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        sent.update(headers or {})
        answer = requests.request(method, self.base + path, json=body, headers=sent, timeout=30, **kwargs)
        assert answer.headers["Cache-Control"] == "no-store"
        assert not any(h.lower().startswith("access-control-") for h in answer.headers)
        if answer.status_code >= 400:
            assert answer.headers["Content-Type"] == "application/problem+json"
            problem = answer.json()
            assert problem["status"] == answer.status_code and problem["title"] and problem["detail"]
        if (
            path.startswith("/notifications") and answer.status_code != 405
        ):  # an operation of the document: the answer conforms
            self.document.validate_response(RequestsOpenAPIRequest(answer.request), RequestsOpenAPIResponse(answer))
        return answer


@pytest.fixture
def api(base, document, token):
    return Client(base, document, token)


def test_create_read_and_act_on_a_row(api):
    made = api("POST", "/notifications", {**HOOK, "key": "invoice-7", "fire_at": "2030-01-01T09:00:00+02:00"})
    assert made.status_code == 201
    body = made.json()
    assert body["key"] == "invoice-7" and body["state"] == "scheduled"
    assert datetime.fromisoformat(body["next_fire_at"]) == datetime(2030, 1, 1, 7, tzinfo=UTC)
    pk = body["id"]
    assert Notification.objects.get(pk=pk).payload == {"n": 1}

    shown = api("GET", f"/notifications/{pk}").json()
    assert shown == api("GET", "/notifications", params={"key": "invoice-7"}).json()
    assert shown["channels"] == ["webhook"] and shown["error_count"] == 0
    assert api("POST", f"/notifications/{pk}/pause").json()["state"] == "paused"
    assert api("POST", f"/notifications/{pk}/resume").json()["state"] == "scheduled"
    assert api("POST", f"/notifications/{pk}/run-now").json()["state"] == "due"
    assert api("POST", f"/notifications/{pk}/cancel").status_code == 204
    assert not Notification.objects.filter(pk=pk).exists()
    assert api("GET", f"/notifications/{pk}").status_code == 404
    assert api("POST", f"/notifications/{pk}/cancel").status_code == 404


def test_no_secret_is_ever_returned(api):
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    pk = api("POST", "/notifications", {**HOOK, "webhook_secret": secret}).json()["id"]
    for answer in (api("GET", f"/notifications/{pk}"), api("POST", f"/notifications/{pk}/pause")):
        assert secret not in answer.text and "webhook_secret" not in answer.text


def test_invalid_fields_are_422_by_field_through_schedule_s_own_rules(api):
    answer = api("POST", "/notifications", {"channels": ["webhook"], "webhook_url": "ftp://example.com/"})
    assert answer.status_code == 422
    assert set(answer.json()["errors"]) == {"webhook_url"}
    unknown = api("POST", "/notifications", {**HOOK, "colour": "red"})
    assert unknown.status_code == 422 and "colour" in unknown.json()["errors"]
    naive = api("POST", "/notifications", {**HOOK, "fire_at": "2030-01-01T09:00:00"})
    assert naive.status_code == 422 and "fire_at" in naive.json()["errors"]
    assert not Notification.objects.exists()


def test_a_taken_key_is_409_and_replace_and_keep_work(api):
    first = api("POST", "/notifications", {**HOOK, "key": "k"}).json()["id"]
    taken = api("POST", "/notifications", {**HOOK, "key": "k"})
    assert taken.status_code == 409 and "key" in taken.json()["errors"]
    kept = api("POST", "/notifications", {**HOOK, "key": "k", "on_conflict": "keep", "payload": {"n": 2}})
    assert kept.json()["id"] == first and Notification.objects.get().payload == {"n": 1}
    api("POST", "/notifications", {**HOOK, "key": "k", "on_conflict": "replace", "payload": {"n": 3}})
    assert Notification.objects.get().payload == {"n": 3}


def test_a_batch_is_all_or_nothing_with_errors_by_index(api):
    good = api("POST", "/notifications/batch", {"rows": [HOOK, {**HOOK, "key": "b"}]})
    assert good.status_code == 201 and len(good.json()["ids"]) == 2
    bad = api(
        "POST", "/notifications/batch", {"rows": [HOOK, {**HOOK, "webhook_url": "ftp://x/"}, {**HOOK, "key": "b"}]}
    )
    assert bad.status_code == 422
    assert set(bad.json()["errors"]) == {"1.webhook_url"}
    odd = api("POST", "/notifications/batch", {"rows": [HOOK, {**HOOK, "colour": 1}]})
    assert odd.status_code == 422 and set(odd.json()["errors"]) == {"1.colour"}
    not_a_row = api("POST", "/notifications/batch", {"rows": [HOOK, 1]})
    assert not_a_row.status_code == 422 and set(not_a_row.json()["errors"]) == {"1"}
    not_an_object = api("POST", "/notifications", [HOOK])
    assert not_an_object.status_code == 422 and set(not_an_object.json()["errors"]) == {"body"}
    assert Notification.objects.count() == 2


@override_settings(NOTIFICATIONS_API_MAX_BATCH=3)
def test_a_batch_over_the_limit_is_refused(api):
    answer = api("POST", "/notifications/batch", {"rows": [HOOK] * 4})
    assert answer.status_code == 422 and "rows" in answer.json()["errors"]
    assert not Notification.objects.exists()


def test_attachments_come_as_base64_with_schedule_s_limits(api):
    content = base64.b64encode(b"%PDF-1.4 hello").decode()
    mail = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "See attached."}
    made = api(
        "POST",
        "/notifications",
        {**mail, "attachments": [{"filename": "a.pdf", "content": content, "mimetype": "application/pdf"}]},
    )
    assert made.status_code == 201
    stored = Notification.objects.get(pk=made.json()["id"]).attachments
    assert stored[0]["name"] == "a.pdf" and stored[0]["size"] == len(b"%PDF-1.4 hello")
    not_b64 = api("POST", "/notifications", {**mail, "attachments": [{"filename": "a.pdf", "content": "%%%"}]})
    assert not_b64.status_code == 422 and "attachments" in not_b64.json()["errors"]
    with override_settings(NOTIFICATIONS_MAX_ATTACHMENT_BYTES=4):
        too_big = api("POST", "/notifications", {**mail, "attachments": [{"filename": "a.pdf", "content": content}]})
    assert too_big.status_code == 422 and "attachments" in too_big.json()["errors"]


def test_tokens_scopes_and_cookies(base, document, api, admin_client, live_server):
    reader = Client(base, document, tokens.create("reader", ["read"])[1])
    assert reader("POST", "/notifications", HOOK).status_code == 403
    nobody = Client(base, document, None)
    refused = nobody("POST", "/notifications", HOOK)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert Client(base, document, "not-a-token")("GET", "/notifications/1").status_code == 401
    # A logged-in admin's session cookie alone is never enough.
    cookie = admin_client.cookies["sessionid"].value
    answer = requests.post(f"{base}/notifications", json=HOOK, cookies={"sessionid": cookie}, timeout=30)
    assert answer.status_code == 401
    assert not Notification.objects.exists()


def test_a_revoked_token_is_refused_at_once(base, document):
    token = tokens.create("soon-gone", ["read"])[1]
    client = Client(base, document, token)
    assert client("GET", "/notifications/1").status_code == 404
    assert ApiToken.objects.get().last_used_at is not None
    assert tokens.revoke("soon-gone")
    assert client("GET", "/notifications/1").status_code == 401


def test_malformed_wrong_type_too_big_and_unknown(api, base, token):
    auth = {"Authorization": f"Bearer {token}"}
    malformed = api("POST", "/notifications", data="{not json", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400
    form = api("POST", "/notifications", data="a=b", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415
    assert api("DELETE", "/notifications/1").status_code == 405
    assert api("GET", "/nothing/here").status_code == 404
    with override_settings(NOTIFICATIONS_API_MAX_BODY=100):
        big = api("POST", "/notifications", {**HOOK, "payload": {"x": "y" * 200}})
        assert big.status_code == 413
        # A client that says a gigabyte follows is answered on its header: the server
        # does not wait for (or read) the body it never sends.
        host, port = base.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(
                b"POST /notifications/api/v1/notifications HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: {auth['Authorization']}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{}"
            )
            assert conn.recv(100).startswith(b"HTTP/1.1 413")
    assert not Notification.objects.exists()


def test_idempotency_key_replays_and_refuses_another_body(api):
    headers = {"Idempotency-Key": "order-1"}
    first = api("POST", "/notifications", HOOK, headers=headers)
    again = api("POST", "/notifications", HOOK, headers=headers)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert Notification.objects.count() == 1
    other = api("POST", "/notifications", {**HOOK, "payload": {"n": 2}}, headers=headers)
    assert other.status_code == 422
    assert api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "x" * 201}).status_code == 422
    assert Notification.objects.count() == 1


def test_idempotency_records_expire_and_housekeeping_prunes_them(api):
    api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "day-old"})
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=25))
    assert api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "day-old"}).status_code == 201
    assert Notification.objects.count() == 2  # the old record no longer replays
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=25))
    housekeeping.prune_history(timezone.now(), retention_days=30)
    assert not IdempotencyRecord.objects.exists()


def test_the_document_is_openapi_3_1_and_open(base):
    answer = requests.get(f"{base}/openapi.json", timeout=30)
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    document = answer.json()
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) == {
        "/notifications/api/v1/notifications",
        "/notifications/api/v1/notifications/batch",
        "/notifications/api/v1/notifications/{id}",
        "/notifications/api/v1/notifications/{id}/cancel",
        "/notifications/api/v1/notifications/{id}/pause",
        "/notifications/api/v1/notifications/{id}/resume",
        "/notifications/api/v1/notifications/{id}/run-now",
    }
    # What a generated client needs: names for the operations, the header a POST may send.
    operations = [op for methods in document["paths"].values() for op in methods.values()]
    assert all(op["operationId"].endswith(("notification", "notifications", "by_key", "now")) for op in operations)
    for methods in document["paths"].values():
        if "post" in methods:
            headers = [p["name"] for p in methods["post"]["parameters"] if p["in"] == "header"]
            assert headers == ["Idempotency-Key"]


def test_the_token_command_prints_the_token_alone_on_its_last_line():
    out = io.StringIO()
    call_command("notifications_token", "create", "billing", "--scope", "schedule,read", stdout=out)
    token = out.getvalue().splitlines()[-1]
    assert tokens.authenticate(token).name == "billing"
    assert token not in json.dumps(list(ApiToken.objects.values()), default=str)
    listing = io.StringIO()
    call_command("notifications_token", "list", stdout=listing)
    assert "billing" in listing.getvalue() and token not in listing.getvalue()
    call_command("notifications_token", "revoke", "billing", stdout=io.StringIO())
    assert tokens.authenticate(token) is None


def test_the_admin_lists_tokens_without_a_secret_and_revokes_them(admin_client):
    record, token = tokens.create("billing", ["schedule"])
    page = admin_client.get("/admin/notifications/apitoken/")
    assert page.status_code == 200 and b"billing" in page.content
    assert token.encode() not in page.content and record.token_hash.encode() not in page.content
    change = admin_client.get(f"/admin/notifications/apitoken/{record.pk}/change/")
    assert record.token_hash.encode() not in change.content
    admin_client.post("/admin/notifications/apitoken/", {"action": "revoke", "_selected_action": [record.pk]})
    assert tokens.authenticate(token) is None


@pytest.mark.django_db(transaction=False)
def test_without_ninja_the_api_is_not_mounted_and_a_site_that_set_it_up_is_warned(monkeypatch, settings):
    import importlib.util

    from notifications.checks.api import check_api_installed

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ninja" else real(name, *a))
    assert check_api_installed() == []  # the site did not ask for the API: nothing to say
    settings.NOTIFICATIONS_API_MAX_BATCH = 10
    [warning] = check_api_installed()
    assert warning.id == "notifications.W060" and "django-ninja" in warning.msg
    import notifications.urls

    monkeypatch.setitem(__import__("sys").modules, "ninja", None)
    urls = importlib.reload(notifications.urls)
    names = [p.name for p in urls.urlpatterns]
    assert names == ["unsubscribe", "preferences", "inbox", "inbox-counts", "inbox-messages", "inbox-mark"]
    monkeypatch.undo()
    importlib.reload(notifications.urls)


@override_settings(NOTIFICATIONS_API_RATE_LIMIT="2/m")
def test_a_token_over_its_rate_is_429_with_retry_after(api, base, document):
    assert api("GET", "/notifications/1").status_code == 404
    assert api("GET", "/notifications/1").status_code == 404
    limited = api("GET", "/notifications/1")
    assert limited.status_code == 429 and 1 <= int(limited.headers["Retry-After"]) <= 60
    # another token has its own bucket
    assert Client(base, document, tokens.create("other", ["read"])[1])("GET", "/notifications/1").status_code == 404


@override_settings(NOTIFICATIONS_API_RATE_LIMIT="1/m")
def test_a_429_is_not_kept_as_an_idempotency_key_s_answer(api):
    assert api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "a"}).status_code == 201
    assert api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "b"}).status_code == 429
    with time_machine.travel(timezone.now() + timedelta(minutes=2), tick=True):
        assert api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "b"}).status_code == 201
    assert Notification.objects.count() == 2


def test_an_escalation_is_scheduled_and_refused_through_schedule_s_rules(api):
    row = {"channels": ["inbox"], "recipient": "user:7", "subject": "Hi", "body": "Hi", "email_to": "ada@example.com"}
    made = api("POST", "/notifications", {**row, "escalate_after": 600, "escalate_to": ["email"]})
    assert made.status_code == 201
    saved = Notification.objects.get(pk=made.json()["id"])
    assert (saved.escalate_after, saved.escalate_to, saved.escalate_unless) == (600, ["email"], "read")
    refused = api("POST", "/notifications", {**row, "escalate_after": 600, "escalate_to": ["inbox"]})
    assert refused.status_code == 422 and set(refused.json()["errors"]) == {"escalate_to"}
