"""A scripted policy behind an OpenAI-compatible endpoint, for the stacks that call a model over HTTP.

`POST /v1/chat/completions` (verifiers) and `POST /v1/responses` (NeMo Gym's agents) answer what `script`
returns for the conversation so far: text, tool calls, or both. Standard library only: it runs in every side
venv. Every conversation it saw is kept in `seen`, so a test can check what the stack showed the policy.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Turn:
    """The conversation as the policy sees it: (role, text) pairs; tool results have role `tool`."""

    messages: list[tuple[str, str]]
    tools: list[str]

    @property
    def tool_results(self) -> list[str]:
        return [text for role, text in self.messages if role == "tool"]

    @property
    def user(self) -> str:
        return "\n".join(text for role, text in self.messages if role == "user")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def chat_turn(body: dict[str, Any]) -> Turn:
    messages = [(m["role"], _text(m.get("content"))) for m in body["messages"]]
    return Turn(messages, [tool["function"]["name"] for tool in body.get("tools") or []])


def responses_turn(body: dict[str, Any]) -> Turn:
    items = [{"role": "user", "content": body["input"]}] if isinstance(body["input"], str) else body["input"]
    messages = []
    for item in items:
        if item.get("type") == "function_call_output":
            messages.append(("tool", str(item["output"])))
        elif item.get("type") == "function_call":
            messages.append(("assistant", f"call {item['name']}"))
        elif "role" in item:
            messages.append((item["role"], _text(item.get("content"))))
    return Turn(messages, [tool["name"] for tool in body.get("tools") or []])


class ScriptedPolicy:
    def __init__(self, script: Callable[[Turn], Reply]) -> None:
        self.script = script
        self.seen: list[Turn] = []
        self.ids = itertools.count()
        self.lock = threading.Lock()

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        turn = chat_turn(body) if path.endswith("/chat/completions") else responses_turn(body)
        with self.lock:
            self.seen.append(turn)
            n = next(self.ids)
        reply = self.script(turn)
        calls = [(f"call_{n}_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(reply.calls)]
        if path.endswith("/chat/completions"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if calls:
                message["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                    for cid, name, args in calls
                ]
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
            return {
                "id": f"chat-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [choice],
                "usage": usage,
            }
        output: list[dict[str, Any]] = []
        if reply.text:
            content = [{"type": "output_text", "text": reply.text, "annotations": []}]
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": content,
                }
            )
        output += [
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": name,
                "arguments": args,
                "status": "completed",
            }
            for cid, name, args in calls
        ]
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": time.time(),
            "model": body.get("model", "scripted"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "status": "completed",
        }

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Listen on a free loopback port for the length of the `with`; yields the base URL (`.../v1`)."""
        policy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                data = json.dumps(policy.answer(self.path, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()
