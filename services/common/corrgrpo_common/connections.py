"""Connection limits uvicorn lacks, and the one place the server is configured.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for a request's headers
and body, so slowloris clients (a byte now and then) hold sockets without end, and it accepts any number of
connections. `GuardedH11Protocol` closes a connection whose request headers are not complete
`header_timeout_s` after it opened (or after its previous response), or whose body is not complete
`body_timeout_s` after its headers; and answers a connection beyond `max_connections` at once with `503` and
`Retry-After` (a client then retries instead of reporting a read error), then closes it; and admits a scoring
request from its first bytes, or refuses it with `429` when the item budget has no room (`EarlyAdmission`; on
a fresh connection already at accept, by the listening socket, `ScreeningListener`, whose reservation the
connection's protocol adopts). A closed request's handler sees `http.disconnect` like any other.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from typing import Any, Literal

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.h11_impl import H11Protocol

from .guards.admission import RESERVATION_KEY, EarlyAdmission, Reservation, raw_refusal
from .listener import REFUSED_LINGER_S, ScreeningListener
from .settings import ServiceSettings

log = logging.getLogger("corrgrpo.connections")
Stage = Literal["headers", "body", "app"]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines, a connection cap and early refusal (class attributes,
    set per server)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 1024
    retry_after_s: int = 1
    early_admission: EarlyAdmission | None = None
    listener: ScreeningListener | None = None  # holds the reservations made at accept

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._stage: Stage = "headers"
        self._refused = False
        # made from the request line, until the request's scope holds it
        self._reservation: Reservation | None = None
        self._cycle_before: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.listener is not None:
            self._reservation = self.listener.adopt(transport.get_extra_info("socket").fileno())
        if len(self.connections) > self.max_connections:
            log.debug("connection over the cap refused with 503", extra={"limit": self.max_connections})
            message = f"connection limit ({self.max_connections}) reached; retry after {self.retry_after_s}s"
            return self._refuse(raw_refusal("503 Service Unavailable", message, self.retry_after_s))
        self._arm("headers", self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        # the first bytes of a request (none of an earlier one left unparsed): a scoring request is admitted
        # or refused
        first = self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]
        if first and self._reservation is None and self.early_admission:  # none taken at accept
            verdict = self.early_admission.screen(data)
            if isinstance(verdict, bytes):
                return self._refuse(verdict)
            self._reservation = verdict
        if first and self._reservation is not None:
            self._cycle_before = self.cycle
        super().data_received(data)

    def _release_unclaimed(self) -> None:
        """Releases a reservation no AdmitScoring took: its request was refused before (framing, auth) or
        never began."""
        unclaimed = [self._reservation, self.cycle.scope.pop(RESERVATION_KEY, None) if self.cycle else None]
        for reservation in filter(None, unclaimed):
            reservation.release()
        self._reservation = None

    def _refuse(self, response: bytes) -> None:
        self._refused = True
        self.transport.write(response)
        # the client reads the answer, then end of stream. What it sends is discarded
        self.transport.write_eof()
        self._arm("app", REFUSED_LINGER_S)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._release_unclaimed()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._reservation is not None and self.cycle is not self._cycle_before:
            # the request's task is created, not started: its scope takes the reservation before AdmitScoring
            # looks
            self.cycle.scope[RESERVATION_KEY] = self._reservation  # type: ignore[union-attr]
            self._reservation = None
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._stage == "headers":
            self._arm("body", self.body_timeout_s)
        elif state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR) and self._stage != "app":
            self._disarm()
            self._stage = "app"  # the request is in. The handler's time is the in-flight budget's business

    def on_response_complete(self) -> None:
        self._release_unclaimed()
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm("headers", self.header_timeout_s)

    def _arm(self, stage: Stage, seconds: float) -> None:
        self._disarm()
        self._stage = stage
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            if not self._refused:
                log.info("slow client closed", extra={"stage": self._stage, "client": self.client})
            self.transport.close()


def run_server(app: FastAPI, settings: ServiceSettings) -> None:
    """Serve `app` with the kit's connection limits, idle timeout and bounded graceful shutdown."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        timeout_keep_alive=settings.idle_timeout_s,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        log_config=None,
        access_log=False,
    )
    # bound (and announced) as uvicorn.run would, then refusing at accept what the budget has no room for
    listener = ScreeningListener.wrap(config.bind_socket(), app.state.early_admission)
    limits = {
        "header_timeout_s": settings.header_timeout_s,
        "body_timeout_s": settings.body_timeout_s,
        "max_connections": settings.max_connections,
        "retry_after_s": settings.retry_after_s,
        "early_admission": app.state.early_admission,
        "listener": listener,
    }
    config.http = type("ServiceH11Protocol", (GuardedH11Protocol,), limits)
    # What is left after start-up's garbage (modules, the app, loaded datasets) lives as long as the process:
    # out of the collector's sight, no collection a request triggers walks it again (6% of the code service's
    # CPU on inline batches, HumanEval loaded)
    gc.collect()
    gc.freeze()
    server = uvicorn.Server(config)
    server.run(sockets=[listener])
    if not server.started:
        sys.exit(STARTUP_FAILURE)
