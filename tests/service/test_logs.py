"""Plain-text logs (`make serve`, `python -m corrgrpo_devtools up`) carry what the JSON logs carry: a
request's method, path, status and milliseconds, and any other `extra=` field, on the message's line."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time

import httpx

from corrgrpo_common.logs import PlainFormatter
from corrgrpo_testing.servers import free_port

READY_S = 120


def record(message: str, **extra: object) -> logging.LogRecord:
    entry = logging.LogRecord("corrgrpo.service", logging.INFO, __file__, 1, message, None, None)
    entry.__dict__.update(extra)
    return entry


def test_a_plain_line_carries_the_extra_fields_after_the_message() -> None:
    line = PlainFormatter().format(record("request", method="POST", path="/v1/score", status=422, ms=1.5))
    assert line.endswith(" INFO corrgrpo.service request method=POST path=/v1/score status=422 ms=1.5")
    quoted = PlainFormatter().format(record("run cache unavailable", error="Timeout: no answer", empty=""))
    assert quoted.endswith(' run cache unavailable error="Timeout: no answer" empty=""')


def test_up_prints_each_request_with_method_path_status_and_ms() -> None:
    port = free_port()
    command = [sys.executable, "-m", "corrgrpo_devtools", "up", "toolcall", "--port", f"toolcall={port}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in process.stdout or []), daemon=True
    )
    reader.start()
    try:
        deadline = time.monotonic() + READY_S
        while not any("service(s) up" in line for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "\n".join(lines)
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/v1/components", timeout=30).status_code == 200
        assert httpx.post(f"{url}/v1/score", json={"items": "not a list"}, timeout=30).status_code == 422
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
        reader.join(10)
    requests = [line for line in lines if line.startswith("[toolcall] ") and " request " in line]
    pattern = (
        r"\[toolcall\] \S+ \S+ INFO corrgrpo\.service request method={} path={} status={} ms=\d+(\.\d+)?$"
    )
    assert any(re.search(pattern.format("GET", "/v1/components", 200), line) for line in requests), requests
    assert any(re.search(pattern.format("POST", "/v1/score", 422), line) for line in requests), requests
