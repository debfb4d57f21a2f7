"""AgentDojo rollouts: parse a policy's tool calls, and run multi-turn episodes against the episode API.

Tool calls are read in the Qwen/Hermes form the chat templates produce: `<tool_call>` blocks with
one JSON object per line, `{"name": ..., "arguments": {...}}` (ToolRL's `"parameters"` is accepted
too). The final answer is the `<response>` block when there is one, else the text outside the
`<think>` and `<tool_call>` blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from corrgrpo_proto import AsyncRewardClient
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishResponse, StepResponse, ToolCall

TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
RESPONSE_BLOCK = re.compile(r"<response>(.*?)(?:</response>|$)", re.DOTALL)
THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)

Messages = list[dict[str, Any]]
Generate = Callable[[Messages, list[dict[str, Any]]], Awaitable[str]]


def _call(line: str) -> ToolCall | None:
    try:
        call = json.loads(line)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    args = call.get("arguments", call.get("parameters", {}))
    return ToolCall(function=call["name"], args=args if isinstance(args, dict) else {})


def parse_tool_calls(text: str) -> tuple[list[ToolCall], str]:
    """(tool calls in order, final answer) of one assistant message; unparseable lines are dropped."""
    calls = [call for block in TOOL_CALL_BLOCK.findall(text) for line in block.splitlines() if (call := _call(line.strip()))]
    if response := RESPONSE_BLOCK.search(text):
        return calls, response.group(1).strip()
    return calls, TOOL_CALL_BLOCK.sub("", THINK_BLOCK.sub("", text)).strip()


async def run_episode(client: AsyncRewardClient, spec: EpisodeSpec, generate: Generate, max_turns: int = 8) -> FinishResponse:
    """One multi-turn episode: create it, let the policy call tools until it answers (or `max_turns`), finish it.

    Each turn the policy sees the conversation so far and the tool schemas; its tool calls are executed
    by the service (`/step`) and their results, injections included, come back as `tool` messages.
    """
    episode = Episode.model_validate(await client.request("POST", "/v1/episodes", spec.model_dump(exclude_none=True)))
    messages: Messages = list(episode.messages)
    final_answer = ""
    for _ in range(max_turns):
        text = await generate(messages, episode.tools)
        messages.append({"role": "assistant", "content": text})
        calls, final_answer = parse_tool_calls(text)
        if not calls:
            break
        body = {"tool_calls": [call.model_dump(exclude_none=True) for call in calls]}
        step = StepResponse.model_validate(await client.request("POST", f"/v1/episodes/{episode.episode_id}/step", body))
        messages.extend({"role": "tool", "name": r.function, "content": r.content} for r in step.results)
    finish = await client.request("POST", f"/v1/episodes/{episode.episode_id}/finish", {"final_answer": final_answer})
    return FinishResponse.model_validate(finish)
