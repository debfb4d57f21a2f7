"""The listening socket: a scoring request the in-flight budget has no room for is refused at accept, for a
few µs.

With a fresh connection per request, a refusal made after asyncio accepted the connection (a transport, a
protocol, a task, h11's state: ~180 µs of CPU) let refusals at 10× the sustainable rate take a third of the
core the admitted requests needed. asyncio's server calls `accept` on its listening socket for each new
connection; `ScreeningListener` peeks at the connection's first bytes there (`EarlyAdmission.screen`): a
scoring request without room gets the prepared 429 and a FIN (`shutdown`) and never reaches asyncio: the
socket is closed `REFUSED_LINGER_S` later, its unread request drained first (closing on unread bytes sends a
reset, which can drop the answer before the client reads it). A scoring request with room gets its reservation
at accept, kept by file descriptor for the connection's protocol to `adopt`: connections accepted in one batch
are all screened before any sends its first data, so a reservation taken only then would admit the whole
batch. A connection whose first bytes have not arrived yet, and any other request, goes to asyncio as before
(health probes are answered however full the budget is).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque

from .guards.admission import EarlyAdmission, Reservation

# A refused connection is closed this long after its 429 (or its 503 at the connection cap): closing while its
# request is still arriving would send a reset, which can drop the answer before the client reads it.
REFUSED_LINGER_S = 1.0
_PEEK_BYTES = 32  # more than the longest scoring request line prefix EarlyAdmission looks at
# TCP_DEFER_ACCEPT's wait for a first byte while the budget is full (then the connection is queued anyway)
_DEFER_S = 1
_REFUSALS_PER_CALL = 256  # then the event loop runs its other work, and comes back for the rest
_DRAIN_READS = 4  # reads of up to 64 KiB before a refused connection is closed whatever it still sends


class ScreeningListener(socket.socket):
    """A listening socket whose `accept` refuses the scoring requests the budget has no room for (see the
    module)."""

    admission: EarlyAdmission
    reserved: dict[int, Reservation]  # by file descriptor, until the connection's protocol adopts it
    refused: deque[tuple[float, socket.socket]]  # lingering after their 429, by when to close them
    scratch: bytearray  # what a refused connection's unread request is drained into
    deferring: bool  # whether TCP_DEFER_ACCEPT is on

    @classmethod
    def wrap(cls, sock: socket.socket, admission: EarlyAdmission) -> ScreeningListener:
        """`sock` (bound, not yet served) as a screening listener; `sock` itself is detached."""
        listener = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        listener.admission = admission
        listener.reserved, listener.refused, listener.scratch, listener.deferring = (
            {},
            deque(),
            bytearray(65536),
            False,
        )
        return listener

    def accept(self) -> tuple[socket.socket, object]:
        """The next connection asyncio should serve. Refused ones are answered here. BlockingIOError when
        none is left."""
        self._defer_while_full()
        for _ in range(_REFUSALS_PER_CALL):
            fd, address = self._accept()  # type: ignore[attr-defined]
            # its connection closed before a protocol took it
            if (stale := self.reserved.pop(fd, None)) is not None:
                stale.release()
            conn = socket.socket(self.family, self.type, self.proto, fileno=fd)
            try:
                first = conn.recv(_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            # nothing sent yet (or already reset): asyncio serves it. Its protocol screens it later
            except OSError:
                return conn, address
            verdict = self.admission.screen(first)
            if not isinstance(verdict, bytes):
                if verdict is not None:
                    self.reserved[fd] = verdict
                return conn, address
            self._refuse(conn, verdict)
        # asyncio comes back while more wait
        raise BlockingIOError("refused enough for one turn of the event loop")

    def _defer_while_full(self) -> None:
        """While the budget is full the kernel queues a connection only once its first bytes came
        (`TCP_DEFER_ACCEPT`), so that its request line can be screened here. A connection that sends nothing
        (a TCP probe) waits a second or two. Off otherwise: an idle connection is accepted at once, and counts
        against the connection cap."""
        full = not self.admission.inflight.admits_another()
        if full != self.deferring:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, _DEFER_S if full else 0)
            self.deferring = full

    def adopt(self, fd: int) -> Reservation | None:
        """The reservation taken at accept for the connection on `fd`, for its protocol to hold."""
        return self.reserved.pop(fd, None)

    def _refuse(self, conn: socket.socket, response: bytes) -> None:
        try:
            conn.send(response, socket.MSG_DONTWAIT)
            conn.shutdown(socket.SHUT_WR)
        except OSError:  # the client is gone: nothing to linger for
            conn.close()
            return
        if not self.refused:
            asyncio.get_running_loop().call_later(REFUSED_LINGER_S, self._close_refused)
        self.refused.append((time.monotonic() + REFUSED_LINGER_S, conn))

    def _close_refused(self) -> None:
        """Closes the refused connections whose linger is over (their unread bytes drained). Rearms for the
        rest."""
        now = time.monotonic()
        while self.refused and self.refused[0][0] <= now:
            conn = self.refused.popleft()[1]
            try:
                for _ in range(_DRAIN_READS):
                    if not conn.recv_into(self.scratch, 0, socket.MSG_DONTWAIT):
                        break
            except OSError:
                pass
            conn.close()
        if self.refused:
            asyncio.get_running_loop().call_later(self.refused[0][0] - now, self._close_refused)
