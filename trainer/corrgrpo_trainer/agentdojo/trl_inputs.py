"""AgentDojo's rows and what GRPOTrainer needs to train on them multi-turn, read from the service.

The config's `dataset` section selects the episodes (suites, user tasks, injection tasks, attack) out of
`GET /v1/tasks`. One environment class per suite (the suites' tools differ) and rows select theirs by an
`environment` column, TRL's multi-environment form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

from corrgrpo_proto import RewardClient
from corrgrpo_proto.agentdojo import TasksResponse

from ..config_shape import AgentDojoRL, AgentDojoWarmup, Episodes
from ..rewards import client_options, trained_weights
from .tools import tool_calling_template
from .trl_environment import AgentDojoEnvironment, EpisodeLog, ServiceClock, environment_class, reward_column


def task_rows(tasks: TasksResponse, spec: Episodes) -> list[dict[str, Any]]:
    """Dataset rows (one per episode spec) from the config's `dataset` section (config_shape.Episodes)."""
    rows = []
    for suite in spec.suites or list(tasks.suites):
        known = tasks.suites[suite]
        unearned = {task for flagged in known.utility_without_work.values() for task in flagged}
        users = [
            u for u in (spec.user_tasks or known.user_tasks) if not (spec.exclude_unearned and u in unearned)
        ]
        users = users[: spec.user_tasks_per_suite]
        injections: list[str | None] | Literal["all"] = spec.injection_tasks or [None]
        injections = known.injection_tasks if injections == "all" else injections
        for user_task in users:
            for injection_task in injections:
                rows.append(
                    {
                        "prompt": [
                            {"role": "system", "content": tasks.system_message},
                            {"role": "user", "content": ""},
                        ],
                        "environment": suite,
                        "suite": suite,
                        "user_task": user_task,
                        "injection_task": injection_task,
                        "attack": spec.attack if injection_task else None,
                    }
                )
    return rows


@dataclass
class AgentDojoEpisodes:
    """What GRPOTrainer needs for multi-turn AgentDojo: rows, reward columns and weights, environment
    factories."""

    tasks: TasksResponse
    rows: list[dict[str, Any]]
    columns: list[Callable[..., Any]]
    weights: list[float]
    factories: dict[str, type[AgentDojoEnvironment]]
    clock: ServiceClock
    log: EpisodeLog

    def trainer_kwargs(self, tokenizer: Any) -> dict[str, Any]:
        """Extra GRPOTrainer arguments. Fits the tokenizer's chat template for tool calls in place."""
        tool_calling_template(tokenizer)
        return {"environment_factory": dict(self.factories)}


def agentdojo_episodes(config: AgentDojoRL | AgentDojoWarmup) -> AgentDojoEpisodes:
    """Multi-turn AgentDojo parts of an `agentdojo` config, read from its service."""
    service = config.services[config.domain]  # the service named as the domain
    options = {
        "timeout": 120.0,
        **{k: v for k, v in client_options(service).items() if k in ("timeout", "retries", "token")},
    }
    client = RewardClient(service.url, **options)
    step_client = RewardClient(service.url, **{**options, "retries": 0})
    dataset = config.dataset
    query = urlencode([("suite", suite) for suite in dataset.suites or []])  # probed per suite: ask for ours
    tasks = TasksResponse.model_validate(
        client.request("GET", f"/v1/tasks?{query}" if query else "/v1/tasks")
    )
    rows = task_rows(tasks, dataset)
    if not rows:
        raise ValueError("the agentdojo dataset section selects no episodes")
    clock, log = ServiceClock(), EpisodeLog()
    suites = sorted({row["suite"] for row in rows})
    _, components, weights = trained_weights(client, service.components, service.weights)
    factories = {
        suite: environment_class(suite, tasks.suites[suite].tools, client, step_client, clock, log, weights)
        for suite in suites
    }
    return AgentDojoEpisodes(
        tasks=tasks,
        rows=rows,
        columns=[reward_column(c) for c in components],
        weights=[weights[c] for c in components],
        factories=factories,
        clock=clock,
        log=log,
    )
