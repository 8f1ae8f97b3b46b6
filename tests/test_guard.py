"""The address guard: which addresses a webhook may reach, and that nothing else is ever dialled."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time

import pytest
import requests
import trustme
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from notifications import guard, transport
from notifications.api import schedule
from notifications.engine import run_tick
from notifications.models import DeliveryAttempt, Notification

CLOSED = override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=[])


def teredo(server: str, client: str) -> str:
    """A Teredo address (2001::/32) for `server` with the obfuscated `client` inside."""
    value = (0x20010000 << 96) | (int(ipaddress.IPv4Address(server)) << 64)
    value |= 0x8000 << 48 | (0xFFFF ^ 4242) << 32 | (int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF)
    return str(ipaddress.IPv6Address(value))


REFUSED = [
    # IPv4
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this network"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link-local"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.0.0.8", "IETF protocol assignment"),
    ("192.0.2.10", "documentation"),
    ("192.88.99.1", "6to4 relay"),
    ("192.168.1.1", "private"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    # IPv6
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::7f00:1", "IPv4-compatible"),
    ("fe80::1", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("fc00::1", "unique local"),
    ("fd12:3456:789a::1", "unique local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("ff0e::101", "multicast"),
    ("100::1", "discard-only"),
    ("2001:2::1", "benchmarking"),
    ("2001:10::1", "ORCHID"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("4000::1", "reserved"),
    ("5f00::1", "reserved"),
    # IPv6 forms that embed a refused IPv4 address
    ("::ffff:127.0.0.1", "loopback address inside an IPv4-mapped"),
    ("::ffff:10.0.0.1", "private address inside an IPv4-mapped"),
    ("::ffff:169.254.169.254", "link-local address inside an IPv4-mapped"),
    ("64:ff9b::127.0.0.1", "loopback address inside a NAT64"),
    ("64:ff9b::a9fe:a9fe", "link-local address inside a NAT64"),
    ("2002:7f00:1::1", "loopback address inside a 6to4"),
    ("2002:c0a8:101::1", "private address inside a 6to4"),
    (teredo("65.54.227.120", "127.0.0.1"), "loopback address inside a Teredo"),
    (teredo("10.0.0.1", "8.8.8.8"), "private address inside a Teredo"),
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "100.63.255.255",  # just below CGNAT
    "100.128.0.0",  # just above CGNAT
    "172.15.255.255",
    "172.32.0.1",
    "198.17.255.255",
    "198.20.0.1",
    "223.255.255.254",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "2002:808:808::1",
    teredo("65.54.227.120", "8.8.8.8"),
]


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_refused_ranges(address, reason):
    assert reason in (guard.refusal(address, allowed=[]) or "")


@pytest.mark.parametrize("address", ALLOWED)
def test_public_unicast_is_allowed(address):
    assert guard.refusal(address, allowed=[]) is None


def test_allowed_networks_open_exactly_their_range():
    allowed = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
    assert guard.refusal("127.0.0.1", allowed) is None
    assert guard.refusal("127.9.9.9", allowed) is None
    assert guard.refusal("::1", allowed) is None
    assert guard.refusal("::ffff:127.0.0.1", allowed) is None  # the same target, spelt in IPv6
    assert guard.refusal("10.0.0.1", allowed) == "a private address"
    assert guard.refusal("::2", allowed) is not None


def test_allowed_networks_come_from_settings_and_skip_bad_entries(settings):
    settings.NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = ["10.1.0.0/16", "not a cidr", "fd00::/8"]
    assert guard.allowed_networks() == (ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd00::/8"))
    assert guard.refusal("10.1.2.3") is None
    assert guard.refusal("10.2.0.1") == "a private address"
    settings.NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = []
    assert guard.refusal("10.1.2.3") == "a private address"


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0177.0.0.1", "127.1", "0x7f.1", "0x7f000001", "017700000001", "127.0.1"],
)
def test_ipv4_literal_spellings_are_read_like_the_resolver_does(host):
    assert guard.literal_address(host) == ipaddress.IPv4Address("127.0.0.1")
    with CLOSED:
        assert guard.literal_refusal(host) == (ipaddress.IPv4Address("127.0.0.1"), "a loopback address")


@pytest.mark.parametrize("host", ["[::1]", "::1", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"])
def test_ipv6_literal_spellings(host):
    with CLOSED:
        address, reason = guard.literal_refusal(host)
    assert "loopback" in reason
    assert address in {ipaddress.ip_address("::1"), ipaddress.ip_address("::ffff:127.0.0.1")}


@pytest.mark.parametrize("host", ["example.com", "hooks.example.com", "localhost", "1.2.3.4.5", "::g"])
def test_names_are_not_literals(host):
    assert guard.literal_address(host) is None


# --- resolution ---------------------------------------------------------------------


def fake_resolver(table: dict[str, list[str]], calls: list[str] | None = None, delay: float = 0.0):
    """A getaddrinfo that answers from `table` and records each name asked."""

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if calls is not None:
            calls.append(host)
        if delay:
            time.sleep(delay)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        infos = []
        for address in table[host]:
            if ":" in address:
                infos.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return infos

    return getaddrinfo


def test_a_name_resolving_to_a_refused_address_is_refused(monkeypatch):
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"hooks.example.com": ["10.0.0.7"]}))
    with pytest.raises(guard.BlockedAddress) as caught:
        guard.checked_addresses("hooks.example.com", 443, timeout=2, allowed=[])
    assert caught.value.address == "10.0.0.7"
    assert caught.value.reason == "a private address"


def test_one_refused_address_among_public_ones_refuses_the_name(monkeypatch):
    table = {"mixed.example.com": ["93.184.216.34", "2606:4700:4700::1111", "169.254.169.254"]}
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver(table))
    with pytest.raises(guard.BlockedAddress, match=r"169\.254\.169\.254"):
        guard.checked_addresses("mixed.example.com", 443, timeout=2, allowed=[])


def test_public_answers_are_returned_for_connecting(monkeypatch):
    table = {"public.example.com": ["93.184.216.34", "2606:4700:4700::1111"]}
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver(table))
    infos = guard.checked_addresses("public.example.com", 443, timeout=2, allowed=[])
    assert [info[4][0] for info in infos] == ["93.184.216.34", "2606:4700:4700::1111"]


def test_a_hung_resolver_is_given_up_within_the_timeout(monkeypatch):
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"slow.example.com": ["93.184.216.34"]}, delay=5))
    started = time.monotonic()
    with pytest.raises(guard.ResolutionTimeout):
        guard.checked_addresses("slow.example.com", 443, timeout=0.3, allowed=[])
    assert time.monotonic() - started < 3


# --- validation, up front -----------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000/hook", "127.0.0.1"),
        ("http://[::1]:8000/hook", "::1"),
        ("http://0177.0.0.1/hook", "0177.0.0.1 (127.0.0.1)"),
        ("http://2130706433/hook", "2130706433 (127.0.0.1)"),
    ],
)
def test_schedule_rejects_literal_refused_addresses_with_a_clear_message(url, shown):
    with CLOSED, pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=url)
    messages = caught.value.message_dict["webhook_url"]
    assert any(
        m.startswith(f"Webhooks may not reach {shown}: it is a loopback address.")
        and "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS" in m
        for m in messages
    ), messages


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["http://10.0.0.5/hook", "http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/"]
)
def test_schedule_rejects_private_literals_even_with_loopback_open(url):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=url)
    assert "Webhooks may not reach" in str(caught.value.message_dict["webhook_url"])


@pytest.mark.django_db
def test_validation_honours_the_allowed_networks_setting():
    row = schedule(channels=["webhook"], webhook_url="http://127.0.0.1:9/hook")  # tests open 127.0.0.0/8
    assert row.pk
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["10.0.0.0/8"]):
        assert schedule(channels=["webhook"], webhook_url="http://10.0.0.5/hook").pk


# --- the transport connects only where the guard agreed ---------------------------------


@pytest.fixture
def connects(monkeypatch):
    """Every address any socket in this process tries to connect to."""
    seen: list[tuple] = []
    real = socket.socket.connect

    def spy(sock, address):
        seen.append(address)
        return real(sock, address)

    monkeypatch.setattr(socket.socket, "connect", spy)
    return seen


@pytest.mark.django_db
def test_no_socket_is_opened_to_a_refused_address(hostile, connects):
    server = hostile("ok")
    row = schedule(channels=["webhook"], webhook_url=server.url())  # valid while loopback is open

    with CLOSED:
        report = run_tick()

    assert report.counts()["dead_lettered"] == 1
    row.refresh_from_db()
    assert row.last_error == "webhook: blocked address"
    assert row.dead_lettered_at is not None
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert (attempt.error, attempt.error_class) == ("webhook: blocked address", "permanent")
    assert server.connections == 0
    assert not [a for a in connects if a[1] == server.port]


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["2130706433", "0177.0.0.1", "127.1", "0x7f.0.0.1", "[::ffff:127.0.0.1]"])
def test_literal_spellings_are_refused_at_send_time(hostile, connects, host):
    server = hostile("ok")
    # bulk_create skips validation, as raw SQL would: the tick must still refuse.
    (row,) = Notification.objects.bulk_create(
        [Notification(channels=["webhook"], webhook_url=server.url(host), next_fire_at=timezone.now())]
    )
    with CLOSED:
        run_tick()

    row.refresh_from_db()
    assert row.last_error == "webhook: blocked address"
    assert server.connections == 0
    assert not [a for a in connects if a[1] == server.port]


@pytest.mark.django_db
def test_an_opened_range_is_reached_whatever_the_spelling(hostile):
    server = hostile("ok")
    Notification.objects.bulk_create(
        [Notification(channels=["webhook"], webhook_url=server.url("127.1"), next_fire_at=timezone.now())]
    )
    report = run_tick()
    assert report.counts()["succeeded"] == 1
    assert server.connections == 1


@pytest.mark.django_db
def test_a_name_is_resolved_once_and_the_validated_address_is_dialled(webhook_server, monkeypatch):
    # First answer: loopback (opened by the test settings). Any later answer would be a
    # private address: a client that resolved twice (check, then connect) would be
    # steered there. Ours resolves once and connects to what it checked.
    calls: list[str] = []
    answers = iter([["127.0.0.1"]])

    def rebinding(host, port, family=0, type=0, proto=0, flags=0):
        calls.append(host)
        table = {"hooks.example.test": next(answers, ["10.9.9.9"])}
        return fake_resolver(table)(host, port)

    monkeypatch.setattr(guard, "getaddrinfo", rebinding)
    row = schedule(channels=["webhook"], webhook_url=f"http://hooks.example.test:{webhook_server.port}/hook")

    report = run_tick()

    assert report.counts()["succeeded"] == 1, Notification.objects.filter(pk=row.pk).values("last_error")
    assert calls == ["hooks.example.test"]
    (received,) = webhook_server.received
    assert received.headers["host"] == f"hooks.example.test:{webhook_server.port}"


@pytest.mark.django_db
def test_a_name_resolving_to_a_refused_address_fails_without_a_packet(webhook_server, monkeypatch, connects):
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"intranet.example.test": ["127.0.0.1"]}))
    row = schedule(channels=["webhook"], webhook_url=f"http://intranet.example.test:{webhook_server.port}/")

    with CLOSED:
        run_tick()

    row.refresh_from_db()
    assert row.last_error == "webhook: blocked address"
    assert row.dead_lettered_at is not None
    assert webhook_server.received == []
    assert not [a for a in connects if a[1] == webhook_server.port]


@pytest.mark.django_db
def test_a_hung_resolver_ends_inside_the_channel_deadline(monkeypatch, settings):
    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 1
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"slow.example.test": ["127.0.0.1"]}, delay=20))
    row = schedule(channels=["webhook"], webhook_url="http://slow.example.test/hook")

    started = time.monotonic()
    run_tick()

    assert time.monotonic() - started < 6
    row.refresh_from_db()
    assert row.last_error == "webhook: timed out after 1s"
    assert row.error_count == 1  # transient: retried later


# --- TLS keeps the hostname ---------------------------------------------------------------


def test_https_to_a_validated_address_keeps_sni_and_certificate_checks(hostile, monkeypatch, tmp_path):
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("hooks.example.test").configure_cert(context)
    server = hostile("ok", tls=context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    table = {"hooks.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]}
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver(table))

    session = transport.new_session()
    watchdog = transport.Watchdog()
    try:
        with transport.deadline(5, watchdog):
            response = session.post(server.url("hooks.example.test"), data=b"{}", verify=str(ca_file), timeout=5)
        assert response.status_code == 200
        assert server.server_names == ["hooks.example.test"]  # SNI carries the name, not the address
        assert b"\r\nHost: hooks.example.test:" in server.requests[0]

        # The certificate is checked against the name in the URL: a name it does not
        # cover fails even though the address is the same.
        with transport.deadline(5, watchdog), pytest.raises(requests.exceptions.SSLError):
            session.post(server.url("other.example.test"), data=b"{}", verify=str(ca_file), timeout=5)
    finally:
        session.close()
        watchdog.close()


def test_the_total_deadline_still_cuts_a_dripping_server(hostile):
    server = hostile("drip", interval=0.2)
    session = transport.new_session()
    watchdog = transport.Watchdog()
    started = time.monotonic()
    try:
        # Per-operation timeouts alone never fire: a byte arrives every 0.2 s. The
        # watchdog's shutdown ends the read (as an error or a cut-off response).
        with transport.deadline(1, watchdog) as limit, contextlib.suppress(requests.RequestException):
            session.post(server.url(), data=b"{}", timeout=(5, 5)).close()
        assert limit.expired
    finally:
        session.close()
        watchdog.close()
    assert time.monotonic() - started < 4


def test_lookups_run_off_the_calling_thread(monkeypatch):
    threads: list[str] = []

    def resolver(host, port, family=0, type=0, proto=0, flags=0):
        threads.append(threading.current_thread().name)
        return fake_resolver({"a.example.com": ["93.184.216.34"]})(host, port)

    monkeypatch.setattr(guard, "getaddrinfo", resolver)
    guard.checked_addresses("a.example.com", 80, timeout=2, allowed=[])
    assert threads == ["notifications-resolve"]


@pytest.mark.django_db
def test_credentials_in_a_url_are_refused_and_never_sent(hostile, connects):
    server = hostile("ok")
    url = f"http://admin:hunter2@127.0.0.1:{server.port}/hook"
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=url)
    assert "hunter2" not in str(caught.value)
    # A row that got in anyway (raw SQL) is dead-lettered without a connection.
    (row,) = Notification.objects.bulk_create(
        [Notification(channels=["webhook"], webhook_url=url, next_fire_at=timezone.now())]
    )

    run_tick()

    row.refresh_from_db()
    assert row.dead_lettered_at is not None
    assert "hunter2" not in row.last_error
    assert server.connections == 0
    assert not [a for a in connects if a[1] == server.port]
