"""The corrgrpo services as NeMo Gym resources servers (nemo-gym 0.4, Python >= 3.12).

NeMo Gym 0.5+ needs Python >= 3.13.14, which no registry here ships (Debian has 3.13.5): this stays on 0.4,
with 0.7's names for a failure. An item the service could not score (the service's fault, never the policy's:
the rule of `corrgrpo_proto.common`) answers `mask_sample` = true (0.7: not a valid measurement, left out of
scores), `failure_kind` = "verifier_error" (0.7's shared vocabulary, `nemo_gym.failure_kinds`), the reason in
`failure_reason`, `reward` 0 and no components. A scored one answers `mask_sample` false.

A package of ours that NeMo Gym loads, not routes on the services: NeMo Gym's `/verify` and `/step` bodies are
its Responses-API objects (`nemo_gym.openai_utils`, Python >= 3.12, with ray, mlflow and wandb behind them),
which the services would otherwise have to import and parse. Here a thin NeMo Gym server turns them into our
items and reaches the services only through `corrgrpo_proto`. `adapters/nemo_gym/resources_servers/` holds the
servers' folders (`app.py` + config) that `ng_run` starts.

- `ScoreResourcesServer` (code, tool calls): `/verify` renders the policy's output items (reasoning, text,
  function calls) into the text the service reads, adds the row's item fields (`task_id`, `ground_truth`,
  `problem`, ...; or a bare `label`), scores it with one `POST /v1/score`, and answers `reward` = the weighted
  total, `reward_components` = the vector, and every component as a top-level field too (NeMo Gym's
  `/aggregate_metrics` profiles top-level numbers per component).
- `AgentDojoResourcesServer` (multi-turn, for NeMo Gym's `gymnasium_agent`): `/reset` creates the row's
  episode (`suite`, `user_task`, `injection_task`, `attack`) and observes the user task's prompt; `/step` runs
  the response's function calls in the episode and hands their results back as `info.tool_outputs` (injections
  included). A response without function calls is the final answer: the episode is finished, `reward` is the
  total and `info` carries `reward_components` and each component.

Rows for AgentDojo (the suite's tools as Responses-API function tools, agentdojo's system message):
`python -m corrgrpo_adapters.nemo_gym rows --url http://127.0.0.1:8103 [--suite banking] [--injections]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.openai_utils import NeMoGymResponse
from pydantic import ConfigDict, PrivateAttr
from resources_servers.gymnasium import GymnasiumServer

from corrgrpo_adapters.service import (
    SPEC_KEYS,
    Episodes,
    ServiceInfo,
    completion_text,
    describe,
    episode_specs,
    finished,
    parse_arguments,
)
from corrgrpo_proto import AsyncRewardClient, ItemResult, RewardClient, RewardServiceError


class CorrGRPOConfig(BaseResourcesServerConfig):
    service_url: str
    # overrides of the declared default weights (the total follows them)
    weights: dict[str, float] | None = None


def response_text(response: NeMoGymResponse) -> str:
    """The policy's output items as one turn of text: reasoning as `<think>`, messages, function calls."""
    reasoning, text, calls = [], [], []
    for item in response.output:
        if item.type == "reasoning":
            reasoning += [part.text for part in item.summary]
        elif item.type == "message":
            text += [part.text if part.type == "output_text" else part.refusal for part in item.content]
        elif item.type == "function_call":
            calls.append((item.name, item.arguments))
    return completion_text("".join(text), "".join(reasoning), calls)


FAILURE_KIND = "verifier_error"
"""NeMo Gym 0.7's `nemo_gym.failure_kinds.VERIFIER_ERROR`: the verifier (the service) could not score the
item."""


def reward_fields(result: ItemResult) -> dict[str, Any]:
    """A result as NeMo Gym fields: `reward`, `reward_components`, each component, and 0.7's failure
    fields."""
    components = result.components or {}
    failed = {
        "mask_sample": result.error is not None,
        "failure_kind": FAILURE_KIND if result.error else None,
        "failure_reason": f"{result.error.code}: {result.error.message}" if result.error else None,
    }
    return {"reward": result.total or 0.0, "reward_components": components, **components, **failed}


class ScoreVerifyRequest(BaseVerifyRequest):
    # the row's item fields (and `label`) ride along, as NeMo Gym rows do
    model_config = ConfigDict(extra="allow")


class ScoreVerifyResponse(BaseVerifyResponse):
    """0.7's `BaseMultiRewardVerifyResponse` and its failure fields, declared here since 0.4 has neither."""

    model_config = ConfigDict(extra="allow")  # each component as a top-level field
    reward_components: dict[str, float]
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None


class ScoreResourcesServer(SimpleResourcesServer):
    config: CorrGRPOConfig
    _client: AsyncRewardClient | None = PrivateAttr(None)
    _info: ServiceInfo | None = PrivateAttr(None)

    def service(self) -> tuple[AsyncRewardClient, ServiceInfo]:
        """The client (made on the server's loop) and what the service is (asked once, when first needed)."""
        if self._info is None:
            token = os.environ.get("CORRGRPO_API_TOKEN")
            with RewardClient(self.config.service_url, token=token) as client:
                self._info = describe(client)
            self._client = AsyncRewardClient(self.config.service_url, token=token)
        assert self._client is not None
        return self._client, self._info

    async def verify(self, body: ScoreVerifyRequest) -> ScoreVerifyResponse:
        client, info = await asyncio.to_thread(self.service)
        row = dict(body.model_extra or {})
        (result,) = await client.score(
            [info.item(response_text(body.response), row, row.get("label"))], self.config.weights
        )
        return ScoreVerifyResponse(**body.model_dump(), **reward_fields(result))


class AgentDojoResourcesServer(GymnasiumServer):
    config: CorrGRPOConfig
    _episodes: Episodes | None = PrivateAttr(None)

    def episodes(self) -> Episodes:
        if self._episodes is None:
            self._episodes = Episodes(self.config.service_url, token=os.environ.get("CORRGRPO_API_TOKEN"))
        return self._episodes

    async def reset(
        self, metadata: dict[str, Any], session_id: str | None = None
    ) -> tuple[str | None, dict[str, Any]]:
        episode = await self.episodes().create(metadata)
        self.session_state[session_id] = episode.episode_id
        prompt = "\n\n".join(str(m["content"]) for m in episode.messages if m["role"] == "user")
        return prompt, {"episode_id": episode.episode_id, **{key: getattr(episode, key) for key in SPEC_KEYS}}

    async def step(
        self, action: NeMoGymResponse, metadata: dict[str, Any], session_id: str | None = None
    ) -> tuple[str | None, float, bool, bool, dict[str, Any]]:
        episode_id = self.session_state[session_id]
        calls = [item for item in action.output if item.type == "function_call"]
        if calls:
            body = [
                {"function": c.name, "args": parse_arguments(c.arguments), "id": c.call_id} for c in calls
            ]
            try:
                results = (await self.episodes().step(episode_id, body)).results
                outputs = [
                    {"call_id": c.call_id, "output": r.content} for c, r in zip(calls, results, strict=True)
                ]
            # refused (e.g. too many calls): the policy's doing, it reads why
            except RewardServiceError as error:
                outputs = [{"call_id": c.call_id, "output": error.message} for c in calls]
            return None, 0.0, False, False, {"tool_outputs": outputs}
        result = finished(await self.episodes().finish(episode_id, response_text(action)))
        fields = reward_fields(result)
        return None, fields.pop("reward"), True, False, {"episode_id": episode_id, **fields}


def episode_rows(url: str, suites: list[str] | None = None, injections: bool = False) -> list[dict[str, Any]]:
    """A NeMo Gym row per episode: agentdojo's system message, the suite's tools, the episode's fields."""
    with RewardClient(url, token=os.environ.get("CORRGRPO_API_TOKEN")) as client:
        tasks, specs = episode_specs(client, suites, injections)
    tools = {
        suite: [{"type": "function", "strict": False, **tool["function"]} for tool in listing.tools]
        for suite, listing in tasks.suites.items()
    }
    system = [{"role": "system", "content": tasks.system_message}]
    return [
        {"responses_create_params": {"input": system, "tools": tools[spec["suite"]]}, **spec}
        for spec in specs
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m corrgrpo_adapters.nemo_gym")
    parser.add_argument("command", choices=["rows"])
    parser.add_argument("--url", default="http://127.0.0.1:8103")
    parser.add_argument("--suite", action="append", help="repeatable; every suite by default")
    parser.add_argument(
        "--injections", action="store_true", help="every user task under every injection task too"
    )
    args = parser.parse_args(argv)
    for row in episode_rows(args.url, args.suite, args.injections):
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
