"""Ambiguous HTTP framing against a real service process over a raw socket (issue 26.7).

h11 reads a body that has both `Content-Length` and `Transfer-Encoding: chunked` as chunked and passes both
headers on; a proxy in front that trusts `Content-Length` would end the request elsewhere and forward the rest
as a request of its own (request smuggling). RFC 9112 6.3: such a request may be refused, and the connection
must then close.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from .helpers import Services

BODY = json.dumps({"items": [{"ground_truth": "x", "completion": "y"}]}).encode()
CHUNKED = f"{len(BODY):x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n"
SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def head(*fields: str) -> bytes:
    return (
        "POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + "".join(f + "\r\n" for f in fields)
        + "\r\n"
    ).encode()


def exchange(services: Services, request: bytes) -> bytes:
    """Everything the server sends back until it closes the connection (or 10 s pass)."""
    host, port = services("toolcall").url.removeprefix("http://").split(":")
    received, deadline = b"", time.monotonic() + 10
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the connection stayed open; received {received[:300]!r}")


@pytest.mark.parametrize(
    "fields",
    [
        ("Content-Length: 5", "Transfer-Encoding: chunked"),
        ("Transfer-Encoding: chunked", "Content-Length: 5"),
        ("Content-Length: " + str(len(CHUNKED)), "Transfer-Encoding: chunked"),  # even when both agree
        ("content-length: 0", "transfer-encoding: chunked"),
    ],
)
def test_content_length_with_transfer_encoding_is_400_and_the_connection_closes(
    services: Services, fields: tuple[str, ...]
) -> None:
    received = exchange(services, head(*fields) + CHUNKED + SMUGGLED)
    status, _, rest = received.partition(b"\r\n")
    assert status == b"HTTP/1.1 400 Bad Request", received[:300]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body["error"] == "ambiguous_framing" and "Content-Length and Transfer-Encoding" in body["message"]
    assert b"\n" not in body["message"].encode()
    assert received.count(b"HTTP/1.1 ") == 1  # the request hidden behind the body was never answered


def test_one_framing_header_is_served_as_before(services: Services) -> None:
    for framing, body in (("Transfer-Encoding: chunked", CHUNKED), (f"Content-Length: {len(BODY)}", BODY)):
        received = exchange(services, head(framing, "Connection: close") + body)
        assert received.startswith(b"HTTP/1.1 200 OK"), received[:300]
        assert b'"service":"toolcall"' in received
