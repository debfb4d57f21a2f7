"""Cancellation of a POST whose client went away before its answer, so that its scoring stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("corrgrpo.service")


class CancelOnDisconnect:
    """Cancels a POST's handler when its client goes away before the answer, so its scoring stops.

    The cancellation reaches the scorer as `asyncio.CancelledError` in every task it awaits:
    `asyncio.gather` cancels its children, and a future from `loop.run_in_executor` that has not
    started is removed from the pool's queue. Work already running in a thread or a sandbox is not
    interrupted by asyncio. A scorer that can stop it should do so when it sees the cancellation
    (e.g. `except asyncio.CancelledError: kill the run; raise`). The budget is released by the
    route's `finally`, at once.
    """

    def __init__(self, app: ASGIApp, on_cancel: Callable[[], None]) -> None:
        self.app, self.on_cancel = app, on_cancel

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body_read = asyncio.Event()
        gone: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        answered = False

        async def tracked_receive() -> Message:
            if body_read.is_set():  # only `http.disconnect` can follow the body: the watcher waits for it
                return await asyncio.shield(gone)
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal answered
            answered = answered or (
                message["type"] == "http.response.body" and not message.get("more_body", False)
            )
            await send(message)

        handler = asyncio.ensure_future(self.app(scope, tracked_receive, tracked_send))

        async def watch() -> None:
            await body_read.wait()
            # uvicorn answers it when the client disconnects (or the response is done)
            message = await receive()
            gone.set_result(message)
            if message["type"] == "http.disconnect" and not answered and not handler.done():
                handler.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({handler})
        except asyncio.CancelledError:  # the server is cancelling us (shutdown grace spent): pass it on
            handler.cancel()
            raise
        finally:
            watcher.cancel()
        if handler.cancelled():
            self.on_cancel()
            log.info("client disconnected; its request was cancelled", extra={"path": scope["path"]})
            return
        handler.result()  # re-raise what the handler raised
