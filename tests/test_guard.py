"""The address guard: which addresses a webhook may reach, and that nothing else is ever dialled."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from datetime import timedelta

import pytest
import requests
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels.webhook import guard, transport
from notifications.models import DeliveryAttempt, Notification
from notifications.rules import network
from tests.support.timing import GUARD_SECONDS
from tests.support.tls import server_context

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
    ("169.254.1.1", "link-local"),
    ("169.254.169.254", "cloud metadata"),
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
    ("::ffff:169.254.1.1", "link-local address inside an IPv4-mapped"),
    ("::ffff:169.254.169.254", "cloud metadata address inside an IPv4-mapped"),
    ("64:ff9b::127.0.0.1", "loopback address inside a NAT64"),
    ("64:ff9b::a9fe:101", "link-local address inside a NAT64"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata address inside a NAT64"),
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


# --- cloud metadata endpoints ---------------------------------------------------------

METADATA = [
    "169.254.169.254",  # AWS, GCP, Azure, Oracle, DigitalOcean, Hetzner, OpenStack
    "169.254.170.2",  # AWS ECS
    "169.254.170.23",  # AWS EKS Pod Identity
    "169.254.0.23",  # Tencent
    "169.254.42.42",  # Scaleway
    "100.100.100.200",  # Alibaba
    "168.63.129.16",  # Azure host agent: a public address, allowed before
    "192.0.0.192",  # Oracle Classic
    "fd00:ec2::254",  # AWS IPv6
    "fd00:ec2::23",
    "fd20:ce::254",  # GCP IPv6
    "fd00:c1::a9fe:a9fe",  # Oracle IPv6
    "fd00:42::42",  # Scaleway IPv6
    "fd00:a9fe:a9fe::1",  # Linode IPv6
    "fd00:100::100:200",  # Alibaba IPv6
    "fe80::a9fe:a9fe",  # OpenStack IPv6
]


@pytest.mark.parametrize("address", METADATA)
def test_cloud_metadata_addresses_are_refused_and_named(address):
    assert guard.refusal(address, allowed=[]) == "a cloud metadata address"


@pytest.mark.parametrize(
    ("address", "form"),
    [
        ("::ffff:168.63.129.16", "an IPv4-mapped address"),
        ("64:ff9b::a83f:8110", "a NAT64 address"),
        ("2002:a83f:8110::1", "a 6to4 address"),
        (teredo("65.54.227.120", "168.63.129.16"), "a Teredo address"),
    ],
)
def test_azure_host_agent_is_refused_in_every_ipv6_wrapping(address, form):
    assert guard.refusal(address, allowed=[]) == f"a cloud metadata address inside {form}"


@pytest.mark.parametrize(
    ("address", "broad"),
    [
        ("169.254.169.254", "169.254.0.0/16"),
        ("169.254.170.2", "169.254.170.0/24"),
        ("100.100.100.200", "100.64.0.0/10"),
        ("168.63.129.16", "168.63.0.0/16"),
        ("168.63.129.16", "0.0.0.0/0"),
        ("fd00:ec2::254", "fd00::/8"),
        ("fd20:ce::254", "::/0"),
        ("::ffff:169.254.169.254", "::ffff:0:0/96"),
        ("64:ff9b::a9fe:a9fe", "64:ff9b::/96"),
    ],
)
def test_a_broad_allowed_range_does_not_open_a_metadata_address(address, broad):
    allowed = [ipaddress.ip_network(broad)]
    assert "a cloud metadata address" in (guard.refusal(address, allowed) or "")


def test_a_broad_allowed_range_still_opens_its_other_addresses():
    allowed = [ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fd00::/8")]
    assert guard.refusal("169.254.1.1", allowed) is None
    assert guard.refusal("fd00:ec3::254", allowed) is None


@pytest.mark.parametrize(
    ("address", "listed"),
    [
        ("169.254.169.254", "169.254.169.254/32"),
        ("168.63.129.16", "168.63.129.16/32"),
        ("fd00:ec2::254", "fd00:ec2::254/128"),
        ("fd00:ec2::254", "fd00:ec2::/32"),  # the whole entry
        ("::ffff:169.254.169.254", "169.254.169.254/32"),  # the same target spelt in IPv6
    ],
)
def test_listing_the_metadata_address_itself_opens_it(address, listed):
    assert guard.refusal(address, [ipaddress.ip_network(listed)]) is None


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0177.0.0.1", "127.1", "0x7f.1", "0x7f000001", "017700000001", "127.0.1"],
)
def test_ipv4_literal_spellings_are_read_like_the_resolver_does(host):
    assert network.literal_address(host) == ipaddress.IPv4Address("127.0.0.1")
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
    assert network.literal_address(host) is None


# --- resolution ---------------------------------------------------------------------


def fake_resolver(table: dict[str, list[str]], calls: list[str] | None = None):
    """A getaddrinfo that answers from `table` and records each name asked."""

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if calls is not None:
            calls.append(host)
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


def test_a_hung_resolver_is_given_up_within_the_timeout(hanging):
    started = time.monotonic()
    with pytest.raises(guard.ResolutionTimeout):
        guard.checked_addresses("slow.hang.test", 443, timeout=0.3, allowed=[])
    assert time.monotonic() - started < GUARD_SECONDS  # the resolver hangs until released


# --- hung resolvers -------------------------------------------------------------------------


class HangingResolver:
    """A getaddrinfo for which names under `.hang.test` block until `release()`.

    Other names (and hung ones, once released) answer from `table`; every call is recorded.
    """

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []
        self.released = threading.Event()

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        self.calls.append(host)
        if host.endswith(".hang.test"):
            self.released.wait()
        return fake_resolver(self.table)(host, port)

    def release(self) -> None:
        self.released.set()
        wait_until(lambda: not hung_in_flight())


def hung_in_flight() -> list[str]:
    return [name for name in guard.lookups_in_flight() if name.endswith(".hang.test")]


def wait_until(condition, timeout: float = 30) -> None:
    limit = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < limit, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def hanging(monkeypatch):
    resolver = HangingResolver({"ok.example.test": ["127.0.0.1"], "gate.hang.test": ["93.184.216.34"]})
    monkeypatch.setattr(guard, "getaddrinfo", resolver)
    yield resolver
    resolver.release()  # the lookup threads end before the next test


def in_threads(count: int, target) -> list:
    """Run `target(i)` in `count` threads at once; what each returned or raised."""
    outcomes: list = [None] * count

    def run(i: int) -> None:
        try:
            outcomes[i] = target(i)
        except Exception as exc:  # handed to the test to inspect
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


@pytest.mark.parametrize("names", [1, 40], ids=["one hung name", "forty hung names"])
def test_hung_lookups_cost_nothing_to_other_names(hanging, names):
    # 40 callers give up on hung names at their own deadline; the lookups run on.
    outcomes = in_threads(40, lambda i: guard.resolve(f"h{i % names}.hang.test", 443, timeout=1))
    assert all(isinstance(o, guard.ResolutionTimeout) for o in outcomes), outcomes

    # Before: 32 process-wide slots, each held until its hung lookup returned, so this
    # name waited behind them and timed out. Now it never waits for another name.
    infos = guard.resolve("ok.example.test", 443, timeout=10)
    assert [info[4] for info in infos] == [("127.0.0.1", 443)]
    hung_calls = [name for name in hanging.calls if name.endswith(".hang.test")]
    assert len(hung_calls) == len(hung_in_flight()) == names  # one lookup per hung name, however many callers


def test_concurrent_lookups_of_one_name_make_one_resolver_call(hanging):
    spellings = ["slow.hang.test", "SLOW.hang.test"]
    outcomes = in_threads(20, lambda i: guard.resolve(spellings[i % 2], 80 + i, timeout=0.5))
    assert all(isinstance(o, guard.ResolutionTimeout) for o in outcomes), outcomes
    assert hanging.calls == ["slow.hang.test"]  # every caller, on any port and in any case, joined one lookup

    hanging.release()
    # A finished lookup is not cached: the next caller asks the resolver afresh.
    with pytest.raises(socket.gaierror):
        guard.resolve("slow.hang.test", 80, timeout=5)
    assert hanging.calls == ["slow.hang.test", "slow.hang.test"]


def test_a_shared_lookup_answers_each_caller_with_its_own_port(hanging):
    ports = [80, 443, 8443]
    threads_started = threading.Barrier(len(ports) + 1)

    def ask(i: int) -> list:
        threads_started.wait()
        return guard.resolve("gate.hang.test", ports[i], timeout=30)

    results: list = []
    asker = threading.Thread(target=lambda: results.extend(in_threads(len(ports), ask)))
    asker.start()
    threads_started.wait()
    wait_until(lambda: hung_in_flight() == ["gate.hang.test"])
    hanging.release()
    asker.join(30)
    assert [[info[4] for info in infos] for infos in results] == [[("93.184.216.34", port)] for port in ports]


def test_lookup_threads_are_capped_and_joining_needs_no_room(hanging, monkeypatch):
    wait_until(lambda: not guard.lookups_in_flight())  # nothing left over from other tests
    monkeypatch.setattr(guard, "MAX_LOOKUP_THREADS", 2)
    for name in ("a.hang.test", "b.hang.test"):
        with pytest.raises(guard.ResolutionTimeout):
            guard.resolve(name, 80, timeout=0.2)
    assert hung_in_flight() == ["a.hang.test", "b.hang.test"]

    # At the cap a new name waits for room only as long as its own deadline...
    with pytest.raises(guard.ResolutionTimeout):
        guard.resolve("ok.example.test", 80, timeout=0.3)
    # ...while a name already in flight is joined without a new thread.
    with pytest.raises(guard.ResolutionTimeout):
        guard.resolve("a.hang.test", 80, timeout=0.2)
    assert hanging.calls == ["a.hang.test", "b.hang.test"]

    hanging.release()
    assert guard.resolve("ok.example.test", 80, timeout=5)[0][4] == ("127.0.0.1", 80)


def test_literals_never_reach_the_resolver(monkeypatch):
    def resolver(*args, **kwargs):
        raise AssertionError("a literal reached the resolver")

    monkeypatch.setattr(guard, "getaddrinfo", resolver)
    for host in ("127.0.0.1", "2130706433", "0x7f.1", "93.184.216.34"):
        assert guard.resolve(host, 80, timeout=1)


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
def test_a_hung_resolver_ends_inside_the_channel_deadline(hanging, settings):
    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 1
    row = schedule(channels=["webhook"], webhook_url="http://slow.hang.test/hook")

    started = time.monotonic()
    run_tick()

    assert time.monotonic() - started < GUARD_SECONDS  # the resolver hangs until released
    row.refresh_from_db()
    assert row.last_error == "webhook: timed out after 1s"
    assert row.error_count == 1  # transient: retried later


@pytest.mark.django_db
@pytest.mark.parametrize("names", [1, 40], ids=["one hung name", "forty hung names"])
def test_rows_to_hung_names_cost_no_rows_to_a_healthy_name(hanging, webhook_server, settings, names):
    # The measured case: 40 rows whose names never resolve and 40 rows to a name that
    # resolves at once. Before, the hung lookups kept every process-wide lookup slot
    # long after their rows gave up, and most healthy rows timed out waiting for one.
    settings.NOTIFICATIONS_CONCURRENCY = 40  # every hung row in flight at once
    settings.NOTIFICATIONS_CIRCUIT_BREAKER = {"failures": 0}  # every hung row is sent, none held
    now = timezone.now()
    port = webhook_server.port
    hung = [
        schedule(
            channels=["webhook"],
            webhook_url=f"http://h{i % names}.hang.test:{port}/hook",
            fire_at=now - timedelta(minutes=2),
        ).pk
        for i in range(40)
    ]
    healthy = [
        schedule(
            channels=["webhook"],
            webhook_url=f"http://ok.example.test:{port}/hook",
            fire_at=now - timedelta(minutes=1),
        ).pk
        for _ in range(40)
    ]

    report = run_tick()

    assert report.counts()["succeeded"] == 40
    assert len(webhook_server.received) == 40
    assert not Notification.objects.filter(pk__in=healthy).exists()  # one-shot rows, delivered
    errors = list(Notification.objects.filter(pk__in=hung).values_list("last_error", "error_count"))
    assert errors == [("webhook: timed out after 2s", 1)] * 40
    # Rows to one name share its lookup: one resolver call for all 40 of them.
    assert sorted(set(hanging.calls) - {"ok.example.test"}) == sorted({f"h{i}.hang.test" for i in range(names)})
    assert len(hanging.calls) - hanging.calls.count("ok.example.test") == names


# --- TLS keeps the hostname ---------------------------------------------------------------


def test_https_to_a_validated_address_keeps_sni_and_certificate_checks(hostile, monkeypatch, tmp_path):
    ca_file = tmp_path / "ca.pem"
    server = hostile("ok", tls=server_context("hooks.example.test", ca_file))
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
    assert time.monotonic() - started < GUARD_SECONDS  # the server drips until it is closed


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


# --- cloud metadata endpoints, at save and at connect ---------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://168.63.129.16/machine?comp=goalstate", "168.63.129.16"),
        ("http://2822734096/machine", "2822734096 (168.63.129.16)"),
        ("http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254"),
        ("http://100.100.100.200/latest/meta-data/", "100.100.100.200"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
    ],
)
def test_schedule_refuses_metadata_literals_even_under_a_broad_allowed_range(url, shown):
    with (
        override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["0.0.0.0/0", "fd00::/8"]),
        pytest.raises(ValidationError) as caught,
    ):
        schedule(channels=["webhook"], webhook_url=url)
    messages = caught.value.message_dict["webhook_url"]
    assert any(m.startswith(f"Webhooks may not reach {shown}: it is a cloud metadata address.") for m in messages)


@pytest.mark.django_db
def test_schedule_accepts_a_metadata_address_listed_exactly():
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["168.63.129.16/32"]):
        assert schedule(channels=["webhook"], webhook_url="http://168.63.129.16/hook").pk


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["168.63.129.16", "fd00:ec2::254", "100.100.100.200"])
def test_a_name_resolving_to_a_metadata_address_is_refused_at_connect(monkeypatch, connects, caplog, address):
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"hooks.example.test": [address]}))
    row = schedule(channels=["webhook"], webhook_url="http://hooks.example.test/hook")

    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["0.0.0.0/0", "fd00::/8"]), caplog.at_level("INFO"):
        run_tick()

    row.refresh_from_db()
    assert (row.last_error, row.dead_lettered_at is not None) == ("webhook: blocked address", True)
    assert f"hooks.example.test is {address}, a cloud metadata address" in caplog.text
    assert not [a for a in connects if a[0] == address]


def test_a_name_resolving_to_a_metadata_address_passes_only_when_listed_exactly(monkeypatch):
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"wireserver.example.test": ["168.63.129.16"]}))
    with pytest.raises(guard.BlockedAddress) as caught:
        guard.checked_addresses("wireserver.example.test", 80, timeout=5, allowed=[ipaddress.ip_network("0.0.0.0/0")])
    assert caught.value.reason == "a cloud metadata address"
    infos = guard.checked_addresses(
        "wireserver.example.test", 80, timeout=5, allowed=[ipaddress.ip_network("168.63.129.16/32")]
    )
    assert [info[4] for info in infos] == [("168.63.129.16", 80)]
