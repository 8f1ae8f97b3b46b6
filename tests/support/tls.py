"""TLS for the local test servers: a throwaway CA and a server context for one name."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


def server_context(name: str, ca_file: Path | None = None) -> ssl.SSLContext:
    """A server context with a certificate for `name` only, signed by a new CA; that CA's
    certificate is written to `ca_file` when given (what a client must trust)."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(name).configure_cert(context)
    if ca_file is not None:
        ca.cert_pem.write_to_path(str(ca_file))
    return context
