"""The wire format between the parent (`sandbox.py`) and a worker: length-prefixed JSON headers, raw
bodies."""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")
STREAMS = ("stdout", "stderr", "channel")  # a reply's streams, their bytes following its JSON in this order
PIPE_DEFAULT = 1 << 16  # a new pipe's size


def read_message(fd: int) -> dict | None:
    """One length-prefixed JSON message, or None at a clean end of stream."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, HEADER.unpack(header)[0])
    if body is None:
        raise EOFError("stream ended inside a message")
    return json.loads(body)


def read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, parts: list[bytes | memoryview]) -> None:
    """Gathered writes (a small reply is one write, so the reader wakes once) without joining: a joined copy
    of the streams would outlive their zeroed buffers in the heap that the next child inherits."""
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views.pop(0))
        if views:
            views[0] = views[0][written:]
