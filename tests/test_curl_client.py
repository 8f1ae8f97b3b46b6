"""The webhook's libcurl client (notifications/channels/http/curl.py) against real local servers:
the guard decides every connection, TLS keeps the name, the deadline is total, keep-alive
connections are shared by every worker and host, and the environment's proxy is ignored."""

from __future__ import annotations

import ipaddress
import queue
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from notifications.channels import Firing
from notifications.channels.http import curl, guard
from notifications.channels.webhook.channel import WebhookChannel
from tests.support.hostile_servers import FIFTY_MB
from tests.support.servers import Reply, WebhookServer
from tests.support.timing import GUARD_SECONDS
from tests.support.tls import server_context
from tests.test_guard import fake_resolver

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
JSON = ["content-type: application/json"]


def client(**options) -> curl.CurlClient:
    return curl.CurlClient(**{"allowed": LOOPBACK, "body_limit": 65536, "connections": 64, **options})


def test_https_to_a_name_keeps_sni_and_the_certificate_check(hostile, monkeypatch, tmp_path):
    ca_file = tmp_path / "ca.pem"
    server = hostile("ok", tls=server_context("hooks.example.test", ca_file))
    table = {"hooks.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]}
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver(table))
    https = client(ca_file=str(ca_file))
    try:
        assert https.post(server.url("hooks.example.test"), b"{}", JSON, 5).status == 200
        assert server.server_names == ["hooks.example.test"]  # SNI carries the name, not the address
        assert b"\r\nHost: hooks.example.test:" in server.requests[0]
        # The certificate is checked against the name in the URL, whatever the address.
        with pytest.raises(ssl.SSLError):
            https.post(server.url("other.example.test"), b"{}", JSON, 5)
    finally:
        https.close()


def test_an_untrusted_certificate_is_a_tls_error_of_the_row(hostile, make_row, monkeypatch):
    server = hostile("ok", tls=server_context("hooks.example.test"))  # a CA nobody trusts: certifi's bundle is checked
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"hooks.example.test": ["127.0.0.1"]}))
    row = make_row(channels=["webhook"], webhook_url=server.url("hooks.example.test"))
    channel = WebhookChannel()
    try:
        result = channel.send(Firing(row, str(row.firing_id), timezone.now(), row.owed_channels))
    finally:
        channel.close()
    assert (result.error, result.error_class) == ("webhook: TLS error", "transient")
    assert server.requests == []  # nothing was sent over the failed handshake


def test_a_name_resolving_to_a_refused_address_opens_no_connection(hostile, monkeypatch):
    server = hostile("ok")
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"intranet.example.test": ["127.0.0.1"]}))
    closed = client(allowed=())
    try:
        with pytest.raises(guard.BlockedAddress):
            closed.post(server.url("intranet.example.test"), b"{}", JSON, 5)
    finally:
        closed.close()
    assert server.connections == 0


def test_a_name_is_never_resolved_by_libcurl(hostile, monkeypatch):
    """Only the guard resolves: a name the system cannot resolve still reaches the address
    the guard's resolver gives, and an unknown one fails as not found."""
    server = hostile("ok")
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"only-in-the-guard.invalid": ["127.0.0.1"]}))
    named = client()
    try:
        assert named.post(server.url("only-in-the-guard.invalid"), b"{}", JSON, 5).status == 200
        with pytest.raises(socket.gaierror):
            named.post(server.url("unknown.invalid"), b"{}", JSON, 5)
    finally:
        named.close()


def test_the_deadline_is_total_whatever_a_server_drips(hostile):
    server = hostile("drip", interval=0.2)
    dripped = client()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            dripped.post(server.url(), b"{}", JSON, 1)
    finally:
        dripped.close()
    assert time.monotonic() - started < GUARD_SECONDS  # a byte every 0.2 s never resets it


def test_keep_alive_connections_serve_every_host_and_worker():
    """Sends to several receivers from many threads reuse the connections they opened
    (libcurl's own cache keeps five: the client sizes it)."""
    servers = [WebhookServer() for _ in range(12)]
    shared = client(connections=48)  # room for two per receiver, one per thread
    try:
        urls = [server.url() for server in servers] * 20

        def post(url: str) -> int:
            return shared.post(url, b"{}", JSON, 10).status

        with ThreadPoolExecutor(2) as threads:
            assert set(threads.map(post, urls)) == {200}
        for server in servers:
            assert len(server.received) == 20
            assert len({received.client for received in server.received}) <= 2  # one per thread at most
    finally:
        shared.close()
        for server in servers:
            server.close()


def test_the_environment_proxy_is_not_used(webhook_server, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    direct = client()
    try:
        assert direct.post(webhook_server.url(), b"{}", JSON, 5).status == 200
    finally:
        direct.close()
    assert len(webhook_server.received) == 1


def test_a_redirect_is_answered_not_followed(hostile, webhook_server):
    server = hostile("redirect", location=webhook_server.url())
    redirected = client()
    try:
        assert redirected.post(server.url(), b"{}", JSON, 5).status == 302
    finally:
        redirected.close()
    assert webhook_server.received == []


def test_a_body_past_the_limit_is_dropped_and_the_status_counts(hostile):
    server = hostile("huge", status=503)
    capped = client(body_limit=1024)
    try:
        assert capped.post(server.url(), b"{}", JSON, 10).status == 503
    finally:
        capped.close()
    server.wait_handled(1)
    assert server.bytes_sent < FIFTY_MB  # the connection went before the body's end


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def ipv6_server():
    server = _IPv6Server(("::1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_ipv6_by_name_and_by_literal(ipv6_server, monkeypatch):
    """libcurl believes every name is the IPv4 placeholder: a name the guard resolves to an
    IPv6 address is connected over IPv6 all the same, and so is a literal."""
    port = ipv6_server.server_address[1]
    monkeypatch.setattr(guard, "getaddrinfo", fake_resolver({"six.example.test": ["::1"]}))
    v6 = client(allowed=(ipaddress.ip_network("::1/128"),))
    try:
        assert v6.post(f"http://six.example.test:{port}/hook", b"{}", JSON, 5).status == 204
        assert v6.post(f"http://[::1]:{port}/hook", b"{}", JSON, 5).status == 204
    finally:
        v6.close()


def test_sends_begun_from_one_thread_are_in_flight_together_and_each_answered_once():
    """`begin` returns at once: one thread starts forty sends that the server holds, all
    forty reach it before any is answered, and each is answered once from the client."""
    server = WebhookServer()
    release = threading.Event()

    def hold(request):
        release.wait(30)
        return Reply()

    server.responder = hold
    answers: queue.SimpleQueue = queue.SimpleQueue()
    together = client()
    try:
        for _ in range(40):
            together.begin(server.url(), b"{}", JSON, 30, answers.put)
        server.wait_for(40)  # all in flight at once, started by this one thread
        release.set()
        got = [answers.get(timeout=30) for _ in range(40)]
        assert {answer.status for answer in got} == {200}
        assert answers.empty()
    finally:
        release.set()
        together.close()
        server.close()


def test_a_closed_client_refuses_new_sends_and_finishes_those_in_flight(webhook_server):
    closing = client()
    answers: queue.SimpleQueue = queue.SimpleQueue()
    closing.begin(webhook_server.url(), b"{}", JSON, 10, answers.put)
    closing.close()
    assert answers.get(timeout=30).status == 200  # begun before the close: still answered
    with pytest.raises(ConnectionError):
        closing.begin(webhook_server.url(), b"{}", JSON, 10, answers.put)
