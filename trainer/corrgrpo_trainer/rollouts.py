"""AgentDojo rollouts: multi-turn episodes against the episode API, the policy's raw text read by the service.

The service parses the tool calls and the answer out of each completion (one parser, in its adapter: call
ids kept, a malformed call answered with its error), so the trainer sends text, never parsed calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from corrgrpo_proto import AsyncRewardClient
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishResponse, StepResponse

Messages = list[dict[str, Any]]
Generate = Callable[[Messages, list[dict[str, Any]]], Awaitable[str]]


def tool_message(result: Any) -> dict[str, Any]:
    """A tool result as a chat message; the call id, when the model gave one, ties it to its call."""
    message = {"role": "tool", "name": result.function, "content": result.content}
    return message if result.tool_call_id is None else {**message, "tool_call_id": result.tool_call_id}


async def run_episode(client: AsyncRewardClient, spec: EpisodeSpec, generate: Generate, max_turns: int = 8) -> FinishResponse:
    """One multi-turn episode: create it, let the policy call tools until it answers (or `max_turns`), finish it.

    Each turn the policy sees the conversation so far and the tool schemas; the service executes the tool
    calls in its completion (`/step`) and their results, injections included, come back as `tool` messages.
    A completion without tool calls is the answer the episode is finished with.
    """
    episode = Episode.model_validate(await client.request("POST", "/v1/episodes", spec.model_dump(exclude_none=True)))
    path = f"/v1/episodes/{episode.episode_id}"
    messages: Messages = list(episode.messages)
    text = ""
    for _ in range(max_turns):
        text = await generate(messages, episode.tools)
        messages.append({"role": "assistant", "content": text})
        step = StepResponse.model_validate(await client.request("POST", f"{path}/step", {"completion": text}))
        if not step.results:
            break
        messages.extend(tool_message(result) for result in step.results)
    return FinishResponse.model_validate(await client.request("POST", f"{path}/finish", {"completion": text}))
