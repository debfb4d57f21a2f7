"""The listening socket's own bookkeeping, in-process (its refusals over real connections:
tests/reliability)."""

from __future__ import annotations

import socket

from corrgrpo_common.guards.admission import EarlyAdmission, InflightItems
from corrgrpo_common.listener import ScreeningListener

REQUEST_LINE = b"POST /v1/score HTTP/1.1\r\nHost: x\r\n"


def test_a_reservation_whose_connection_closed_before_its_protocol_took_it_is_released() -> None:
    """asyncio may drop an accepted connection before its protocol adopts the reservation taken at accept: the
    next connection given that descriptor must not inherit it, nor leave it held for good (the budget would
    shrink)."""
    inflight = InflightItems(8, lambda count: None)
    listener = ScreeningListener.wrap(
        socket.create_server(("127.0.0.1", 0)), EarlyAdmission(inflight, 1, lambda: None)
    )
    address = listener.getsockname()
    clients = [socket.create_connection(address) for _ in range(2)]
    try:
        clients[0].sendall(REQUEST_LINE)
        dropped, _ = listener.accept()
        assert inflight.count == 1 and dropped.fileno() in listener.reserved
        fd = dropped.fileno()
        dropped.close()  # never adopted
        clients[1].sendall(REQUEST_LINE)
        taken, _ = listener.accept()
        assert taken.fileno() == fd  # the lowest free descriptor: the dropped connection's
        assert inflight.count == 1  # the second connection's reservation alone
        listener.adopt(fd).release()  # type: ignore[union-attr]
        assert inflight.count == 0
        taken.close()
    finally:
        for client in clients:
            client.close()
        listener.close()
