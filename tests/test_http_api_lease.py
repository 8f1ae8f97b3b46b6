"""An `Idempotency-Key` whose request never answered (its server process killed, its
connection lost) is "in progress" only for its lease: a repeat after it takes the key
over and makes the rows once, because the first request's rows and its answer commit in
one transaction or not at all."""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
from datetime import timedelta

import pytest
import requests
import time_machine
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from openapi_core import Config, OpenAPI

from notifications.http_api import endpoints, idempotency
from notifications.models import ApiToken, IdempotencyRecord, Notification
from notifications.services import tokens
from tests.support.api_server import PAUSED, ApiServer
from tests.test_http_api import HOOK, Client

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/notifications/api/v1/notifications"


@pytest.fixture
def base(live_server):
    return f"{live_server.url}/notifications/api/v1"


@pytest.fixture
def token():
    return tokens.create("all", ["schedule", "read", "manage"])[1]


@pytest.fixture
def api(base, token):
    """requests with the token, each answer held against the API's document (tests.test_http_api)."""
    config = Config(extra_media_type_deserializers={"application/problem+json": json.loads})
    document = OpenAPI.from_dict(requests.get(f"{base}/openapi.json", timeout=30).json(), config=config)
    return Client(base, document, token)


@pytest.fixture
def servers():
    started: list[ApiServer] = []
    yield lambda *args: started.append(ApiServer(*args)) or started[-1]
    for server in started:
        server.kill()


@pytest.fixture
def paused(monkeypatch):
    """The next create in this process's live server stops after inserting its row, inside
    the request's transaction, until `release` is set (later creates pass): (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    real = endpoints.schedule_notification

    def slow(**fields):
        row = real(**fields)
        if not entered.is_set():
            entered.set()
            assert release.wait(60)
        return row

    monkeypatch.setattr(endpoints, "schedule_notification", slow)
    yield entered, release
    release.set()


def in_background(call):
    """Run `call` on a thread; the returned list holds its result once `thread.join()` returns."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def after_the_lease():
    """Travel to just after the stored record's lease (time flows on from there)."""
    leased_until = IdempotencyRecord.objects.get().leased_until
    return time_machine.travel(leased_until + timedelta(seconds=1), tick=True)


def test_a_request_killed_mid_flight_is_taken_over_after_its_lease_and_makes_its_row_once(api, token, servers):
    server = servers("--pause-after-create")
    first = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": "order-7"}
    first.request("POST", PATH, body=json.dumps(HOOK), headers=headers)
    server.wait_for(PAUSED)  # its row inserted, its transaction open, no answer stored
    server.kill()
    first.close()

    assert not Notification.objects.exists()  # the killed transaction took its row with it
    record = IdempotencyRecord.objects.get()
    assert record.status is None and record.leased_until > timezone.now()

    # Another host, while the lease runs: still in progress.
    early = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "order-7"})
    assert early.status_code == 409 and 1 <= int(early.headers["Retry-After"]) <= 60

    with after_the_lease():
        taken = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "order-7"})
        assert taken.status_code == 201
        again = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "order-7"})
    assert again.status_code == 201 and again.json() == taken.json()
    assert list(Notification.objects.values_list("pk", flat=True)) == [taken.json()["id"]]


def dead_request(key: str) -> None:
    """The record a request left when its process died: the key taken, no answer, the lease run out."""
    now = timezone.now()
    fingerprint = hashlib.sha256(PATH.encode() + b"\0" + json.dumps(HOOK).encode()).hexdigest()
    record = ApiToken.objects.get()
    IdempotencyRecord.objects.create(token=record, key=key, request_hash=fingerprint, created_at=now, leased_until=now)


def test_of_two_repeats_after_the_lease_one_takes_the_key_and_the_other_is_409(api, paused):
    dead_request("k")
    entered, release = paused
    with after_the_lease():
        winner, won = in_background(lambda: api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "k"}))
        assert entered.wait(60)  # the winner holds the key, its row not yet committed
        loser = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "k"})
        assert loser.status_code == 409 and int(loser.headers["Retry-After"]) >= 1
        release.set()
        winner.join(60)
    assert won[0].status_code == 201
    assert list(Notification.objects.values_list("pk", flat=True)) == [won[0].json()["id"]]
    assert IdempotencyRecord.objects.get().attempt == 2


def test_racing_take_overs_are_decided_by_the_attempt_they_read(token):
    dead_request("k")
    seen_by_one, seen_by_other = IdempotencyRecord.objects.get(), IdempotencyRecord.objects.get()
    later = timezone.now() + timedelta(seconds=1)
    assert idempotency._take_over(seen_by_one, later)
    assert not idempotency._take_over(seen_by_other, later)  # it read the record before the first took it
    assert IdempotencyRecord.objects.get().attempt == 2


def test_a_request_that_outlived_its_lease_rolls_back_and_the_repeat_s_row_counts(api, paused):
    entered, release = paused
    first, firsts = in_background(lambda: api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "slow"}))
    assert entered.wait(60)  # the first request's row inserted, uncommitted
    with after_the_lease():
        if connection.vendor == "sqlite":
            # One writer: the first request holds the write lock, so a repeat cannot take
            # the key over before it finishes; then the repeat replays its answer.
            repeat, repeats = in_background(
                lambda: api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "slow"})
            )
            release.set()
            repeat.join(90), first.join(90)
            assert firsts[0].status_code == repeats[0].status_code == 201
            assert repeats[0].json() == firsts[0].json()
            winner = firsts[0]
        else:
            winner = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "slow"})
            assert winner.status_code == 201
            release.set()
            first.join(90)
            assert firsts[0].status_code == 409  # its row rolled back with its answer
    assert list(Notification.objects.values_list("pk", flat=True)) == [winner.json()["id"]]
    assert IdempotencyRecord.objects.get().status == 201


@pytest.mark.parametrize("atomic_requests", [False, True])
def test_a_key_in_progress_is_409_even_under_atomic_requests(api, paused, atomic_requests, monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", atomic_requests)
    entered, release = paused
    first, answers = in_background(lambda: api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "k"}))
    assert entered.wait(60)
    second = api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "k"})
    assert second.status_code == 409 and 1 <= int(second.headers["Retry-After"]) <= 60
    release.set()
    first.join(60)
    assert answers[0].status_code == 201 and Notification.objects.count() == 1


@override_settings(NOTIFICATIONS_API_IDEMPOTENCY_LEASE=5)
def test_the_lease_is_a_setting(api, paused):
    entered, release = paused
    first, _ = in_background(lambda: api("POST", "/notifications", HOOK, headers={"Idempotency-Key": "k"}))
    assert entered.wait(60)
    record = IdempotencyRecord.objects.get()
    assert timedelta(seconds=4) < record.leased_until - record.created_at <= timedelta(seconds=5)
    release.set()
    first.join(60)


def test_a_server_error_rolls_the_rows_back_and_lets_the_key_go(base, token, monkeypatch):
    real = endpoints.schedule_notification
    calls = []

    def fails_once(**fields):
        row = real(**fields)
        calls.append(row.pk)
        if len(calls) == 1:
            raise RuntimeError("after the insert")
        return row

    monkeypatch.setattr(endpoints, "schedule_notification", fails_once)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "retry-me"}
    failed = requests.post(f"{base}/notifications", json=HOOK, headers=headers, timeout=60)
    assert failed.status_code == 500 and failed.headers["Content-Type"] == "application/problem+json"
    assert not Notification.objects.exists() and not IdempotencyRecord.objects.exists()
    again = requests.post(f"{base}/notifications", json=HOOK, headers=headers, timeout=60)
    assert again.status_code == 201
    assert list(Notification.objects.values_list("pk", flat=True)) == [again.json()["id"]]
