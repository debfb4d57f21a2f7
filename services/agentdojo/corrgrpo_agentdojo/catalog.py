"""The AgentDojo tasks an episode can be made of: suites of one benchmark version, and attacks.

Attacks in agentdojo address the model they attack by name (`important_instructions` says
"... to you, GPT-4"), so they want a `target_pipeline` with a `name`. We attack no real pipeline:
`NamedTarget` is a stub that only carries the configured model id. Attacks never query it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import agentdojo.attacks  # noqa: F401  (registers the attacks)
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.attacks.attack_registry import ATTACKS
from agentdojo.attacks.base_attacks import BaseAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite

from .start_environments import injection_candidates

INTERACTIVE_ATTACKS = frozenset({"manual"})
"""`manual` asks a human on stdin for each injection: useless in a service."""


class UnknownTask(LookupError):
    """A suite, task or attack that this benchmark version does not have."""


class NamedTarget(BasePipelineElement):
    """The `target_pipeline` attacks want: only its `name` is read (to address the model)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def query(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a stand-in for the attacked model; attacks only read its name")


@dataclass(frozen=True)
class Resolved:
    """The agentdojo objects behind one episode spec (attack is None for utility-only episodes)."""

    suite: TaskSuite
    user_task: BaseUserTask
    injection_task: BaseInjectionTask | None
    attack: BaseAttack | None

    @property
    def key(self) -> tuple[str, str, str | None, str | None]:
        return (
            self.suite.name,
            self.user_task.ID,
            self.injection_task.ID if self.injection_task else None,
            self.attack.name if self.attack else None,
        )

    def injections(self) -> dict[str, str]:
        """What the attack writes into the injection vectors the user task's ground truth reads."""
        if self.attack is None or self.injection_task is None:
            return {}
        return self.attack.attack(self.user_task, self.injection_task)


def _pick(kind: str, name: str, known: Sequence[str]) -> None:
    if name not in known:
        shown = ", ".join(list(known)[:50])
        raise UnknownTask(f"unknown {kind} {name!r}; known: {shown}")


class Catalog:
    """Suites of `version`. Attacks built once per (suite, attack) against a stub target named
    `model_name`."""

    def __init__(self, version: str, default_attack: str, model_name: str) -> None:
        self.version, self.default_attack, self.model_name = version, default_attack, model_name
        self.suites: dict[str, TaskSuite] = dict(get_suites(version))
        if not self.suites:
            raise UnknownTask(f"agentdojo has no benchmark version {version!r}")
        _pick("attack", default_attack, self.attacks)
        self._attacks: dict[tuple[str, str], BaseAttack] = {}

    @cached_property
    def attacks(self) -> list[str]:
        return sorted(name for name in ATTACKS if name not in INTERACTIVE_ATTACKS)

    def attack(self, suite: TaskSuite, name: str) -> BaseAttack:
        _pick("attack", name, self.attacks)
        key = (suite.name, name)
        if key not in self._attacks:
            attack = ATTACKS[name](suite, NamedTarget(self.model_name))
            # agentdojo's own method builds a fresh canary environment per user task. Ours shares one per
            # suite
            attack.get_injection_candidates = lambda user_task: injection_candidates(attack, user_task)  # type: ignore[method-assign]
            self._attacks[key] = attack
        return self._attacks[key]

    def resolve(self, suite: str, user_task: str, injection_task: str | None, attack: str | None) -> Resolved:
        """The objects of a spec. Raises `UnknownTask` with the known names."""
        _pick("suite", suite, sorted(self.suites))
        task_suite = self.suites[suite]
        _pick("user task", user_task, list(task_suite.user_tasks))
        if injection_task is None:
            if attack is not None:
                raise UnknownTask(f"attack {attack!r} given without an injection task to deliver")
            return Resolved(task_suite, task_suite.user_tasks[user_task], None, None)
        _pick("injection task", injection_task, list(task_suite.injection_tasks))
        return Resolved(
            task_suite,
            task_suite.user_tasks[user_task],
            task_suite.injection_tasks[injection_task],
            self.attack(task_suite, attack or self.default_attack),
        )

    def pairs(self, suite: str) -> list[tuple[str, str]]:
        """Every (user task, injection task) of a suite: the benchmark's security grid."""
        task_suite = self.suites[suite]
        return [(u, i) for u in task_suite.user_tasks for i in task_suite.injection_tasks]
