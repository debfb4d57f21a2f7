"""What every adapter needs of a corrgrpo service, reached only through `corrgrpo_proto`'s clients.

- `describe`: the service's name, declared components (with their default weights) and item fields;
- `completion_text`: a policy turn in the text form the services read (Hermes/ToolRL: `<think>`, the answer,
  one `<tool_call>` block per call), for stacks that hand over reasoning and tool calls as structures;
- `Episodes`: the AgentDojo episode API (create, step, finish) on an async client; `episode_specs`: what
  episodes a service offers, as rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corrgrpo_proto import AsyncRewardClient, ComponentSpec, ItemResult, ItemShape, RewardClient
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishResponse, StepResponse, TasksResponse

SPEC_KEYS = ("suite", "user_task", "injection_task", "attack")


@dataclass(frozen=True)
class ServiceInfo:
    """A service as `/v1/components` and `/openapi.json` describe it."""

    name: str
    components: tuple[ComponentSpec, ...]
    shape: ItemShape

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.components]

    @property
    def episodic(self) -> bool:
        """AgentDojo: scored by episodes (create, step, finish), not by single completions."""
        return {"suite", "user_task"} <= self.shape.fields

    def item(self, completion: str, fields: dict[str, Any], label: Any = None) -> dict[str, Any]:
        """The wire item: the row's item fields, the fields a label carries (if any), the completion."""
        extra = self.shape.label_fields(label) if label not in (None, "") else {}
        return {**self.shape.item(completion, fields), **extra, "completion": completion}


def describe(client: RewardClient) -> ServiceInfo:
    """The service behind `client` (two GETs)."""
    components = client.components()
    return ServiceInfo(components.service, tuple(components.components), client.item_shape())


def parse_arguments(arguments: Any) -> Any:
    """A call's arguments as the policy gave them: a JSON text is decoded. What does not decode stays as it is
    (the service then scores the call as malformed: the policy's failure)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def completion_text(text: str, reasoning: str | None = None, calls: Sequence[tuple[str, Any]] = ()) -> str:
    """One policy turn as the text the services parse: `<think>` reasoning, the text, a `<tool_call>` per
    call."""
    parts = [f"<think>{reasoning}</think>"] if reasoning else []
    parts += [text] if text else []
    parts += [
        "<tool_call>\n"
        + json.dumps({"name": name, "parameters": parse_arguments(arguments)})
        + "\n</tool_call>"
        for name, arguments in calls
    ]
    return "\n".join(parts)


def finished(response: FinishResponse) -> ItemResult:
    """An episode's reward vector in the shape `/v1/score` gives it."""
    return ItemResult(
        id=response.episode_id, components=response.components, total=response.total, info=response.info
    )


class Episodes:
    """The AgentDojo episode API. Steps are never retried (a lost step may have run). Create and finish
    are."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 120.0) -> None:
        self.client = AsyncRewardClient(url, token=token, timeout=timeout)
        self.steps = AsyncRewardClient(url, token=token, timeout=timeout, retries=0)

    async def create(self, row: dict[str, Any]) -> Episode:
        spec = EpisodeSpec(**{key: row.get(key) for key in SPEC_KEYS})
        return Episode.model_validate(
            await self.client.request("POST", "/v1/episodes", spec.model_dump(exclude_none=True))
        )

    async def step(self, episode_id: str, calls: list[dict[str, Any]]) -> StepResponse:
        """`calls`: `{"function", "args", "id"}` each. One result per call, in order."""
        answer = await self.steps.request("POST", f"/v1/episodes/{episode_id}/step", {"tool_calls": calls})
        return StepResponse.model_validate(answer)

    async def finish(
        self, episode_id: str, completion: str, weights: dict[str, float] | None = None
    ) -> FinishResponse:
        """Close the episode. The service reads the final answer out of the last turn's text; `total` under
        `weights`."""
        body = {"completion": completion, "weights": weights}
        answer = await self.client.request("POST", f"/v1/episodes/{episode_id}/finish", body)
        return FinishResponse.model_validate(answer)


def episode_specs(
    client: RewardClient,
    suites: Sequence[str] | None = None,
    injections: bool = False,
    attack: str | None = None,
) -> tuple[TasksResponse, list[dict[str, Any]]]:
    """`GET /v1/tasks` and an episode spec per user task of the suites (all by default), under every injection
    task too when `injections` (with `attack`, else the service's default)."""
    query = "&".join(f"suite={suite}" for suite in suites or ())
    tasks = TasksResponse.model_validate(client.request("GET", "/v1/tasks" + (f"?{query}" if query else "")))
    specs = []
    for suite, listing in tasks.suites.items():
        for user_task in listing.user_tasks:
            specs.append({"suite": suite, "user_task": user_task})
            specs += [
                {"suite": suite, "user_task": user_task, "injection_task": injection}
                | ({"attack": attack} if attack else {})
                for injection in (listing.injection_tasks if injections else ())
            ]
    return tasks, specs
