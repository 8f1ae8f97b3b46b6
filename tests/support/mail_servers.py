"""Real mail components on loopback for the email channel's tests.

- `SMTPServer`: aiosmtpd, a real SMTP server; refuses chosen recipients at RCPT, can
  refuse the sender at MAIL FROM and answer DATA with a failure; aiosmtpd's own options
  (a login it refuses, a size limit) pass through.
- `StallingServer`: accepts TCP connections and never says a word (an SMTP server that
  hangs before its greeting).
- `ProviderAPI`: a loopback imitation of an email provider's HTTP API (Resend's
  `POST /emails`, Brevo's `POST /smtp/email`, Postmark's `POST /email`) for the real
  django-anymail backends: it records requests, answers as told, and, like Resend,
  de-duplicates on the `Idempotency-Key` header.
- `mail_settings(...)`: the site settings for a backend, as MAILERS on Django 6.1+ and
  EMAIL_* before.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage as ParsedMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from django.core import mail
from django.test.utils import override_settings

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mail_settings(backend: str, **options: Any) -> override_settings:
    """Point the site's default mailer at `backend` with `options` (SMTP: host, port, timeout)."""
    if hasattr(mail, "mailers"):
        return override_settings(MAILERS={"default": {"BACKEND": backend, "OPTIONS": options}})
    legacy = {f"EMAIL_{name.upper()}": value for name, value in options.items()}
    return override_settings(EMAIL_BACKEND=backend, **legacy)


QUEUE_BACKEND = "notifications.mail.QueuedEmailBackend"


def queue_in_front_of(backend: str, **options: Any) -> override_settings:
    """The site's mail queued (QueuedEmailBackend as its default mailer), and the tick sending
    through `backend` with `options`: the README's two lines, on either side of Django 6.1."""
    if hasattr(mail, "mailers"):
        return override_settings(
            MAILERS={"default": {"BACKEND": QUEUE_BACKEND}, "real": {"BACKEND": backend, "OPTIONS": options}},
            NOTIFICATIONS_MAILER="real",
        )
    legacy = {f"EMAIL_{name.upper()}": value for name, value in options.items()}
    return override_settings(EMAIL_BACKEND=QUEUE_BACKEND, NOTIFICATIONS_EMAIL_BACKEND=backend, **legacy)


def real_connection(backend: str, **options: Any) -> Any:
    """A connection of `backend` made the site's way, to send a reference message directly."""
    if hasattr(mail, "mailers"):
        with override_settings(MAILERS={"default": {"BACKEND": backend, "OPTIONS": options}}):
            return mail.mailers.default
    return mail.get_connection(backend, **options)


# --- SMTP -----------------------------------------------------------------------------------


@dataclass
class Delivered:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> ParsedMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, ParsedMessage)
        return parsed


class _Handler:
    def __init__(self, server: SMTPServer) -> None:
        self.server = server

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.server.mail_reply is not None:
            return self.server.mail_reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        reply = self.server.rcpt_replies.get(address.lower())
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.server.lock:
            self.server.data_attempts += 1
            reply = self.server.data_replies.pop(0) if self.server.data_replies else None
            if reply is not None:
                self.server.refused_data.append(
                    Delivered(envelope.mail_from, list(envelope.rcpt_tos), envelope.content)
                )
                return reply
            self.server.delivered.append(Delivered(envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted for delivery"


class SMTPServer:
    """aiosmtpd on 127.0.0.1. `rcpt_replies` answers chosen recipients at RCPT (e.g. a 550);
    `mail_reply` answers every MAIL FROM (e.g. a 553) while set; `data_replies` answers the
    next DATA commands (e.g. a 451) before accepting again. `options` go to aiosmtpd's
    server (`authenticator=...`, `data_size_limit=...`)."""

    def __init__(self, **options: Any) -> None:
        self.lock = threading.Lock()
        self.delivered: list[Delivered] = []
        self.refused_data: list[Delivered] = []
        self.data_attempts = 0
        self.rcpt_replies: dict[str, str] = {}
        self.data_replies: list[str] = []
        self.mail_reply: str | None = None
        self.port = free_port()
        self.controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port, **options)
        self.controller.start()

    def refuse(self, address: str, reply: str = "550 5.1.1 No such user here") -> None:
        self.rcpt_replies[address.lower()] = reply

    def settings(self, timeout: float | None = 5) -> override_settings:
        return mail_settings(SMTP_BACKEND, host="127.0.0.1", port=self.port, timeout=timeout)

    def close(self) -> None:
        self.controller.stop()


class StallingServer:
    """Accepts connections on 127.0.0.1 and never writes a byte, until closed."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = int(self.listener.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()  # a client still waiting gets EOF and lets go of its thread


# --- a provider's HTTP API ------------------------------------------------------------------


@dataclass
class APIRequest:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class APIReply:
    status: int = 200
    body: Any = field(default_factory=lambda: {"id": str(uuid.uuid4())})
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0  # seconds to wait before answering (past the client's timeout: a stall)


class ProviderAPI:
    """An email provider's HTTP API on 127.0.0.1: records requests and answers `replies` in
    turn (then `default`). Like Resend, a request whose `Idempotency-Key` was accepted
    before is answered with the first answer and not sent again: `sent` counts sends."""

    def __init__(self) -> None:
        self.requests: list[APIRequest] = []
        self.replies: list[APIReply] = []
        self.default = APIReply()
        self.sent: list[APIRequest] = []
        self.responder: Callable[[APIRequest], APIReply] | None = None
        self._seen_keys: dict[str, Any] = {}
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = APIRequest(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
                )
                status, body, headers, stall = api._answer(request)
                if stall:
                    time.sleep(stall)
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up waiting

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, request: APIRequest) -> tuple[int, Any, dict[str, str], float]:
        with self._lock:
            self.requests.append(request)
            key = request.headers.get("idempotency-key")
            if key is not None and key in self._seen_keys:
                return 200, self._seen_keys[key], {}, 0.0  # de-duplicated: not sent again
            reply = self.replies.pop(0) if self.replies else (self.responder or (lambda r: self.default))(request)
            if 200 <= reply.status < 300:
                self.sent.append(request)  # accepted, even if the answer then stalls
                if key is not None:
                    self._seen_keys[key] = reply.body
            return reply.status, reply.body, reply.headers, reply.stall

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
