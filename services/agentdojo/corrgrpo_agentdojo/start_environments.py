"""Injected start environments: built once, copied per episode.

Building one is most of an episode's cost (YAML parse + pydantic validation of the whole suite
environment). An injected environment depends only on the suite and the injection texts, and
many (user task, injection task) pairs put the same texts in the same vectors (v1.2.2: 506
distinct environments for 949 pairs), so `StartCache` keys on (suite, injections) and keeps
pickled bytes. An episode's copy is one `pickle.loads`. A user task that overrides
`init_environment` (none in v1.2.2 does) gets it applied to its own copy.

`load_injected_environment` is agentdojo's `TaskSuite.load_and_inject_default_environment` with
libyaml's C parser when available and the vector defaults parsed once per suite. A test checks
both give equal environments. Which vectors an attack fills is agentdojo's
`BaseAttack.get_injection_candidates` (the vectors the user task's ground truth reads), computed
here on one canary environment per suite instead of a fresh one per user task.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import threading
from collections import OrderedDict
from functools import cache, lru_cache
from typing import Protocol

import pydantic.networks
import yaml
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.attacks.base_attacks import BaseAttack
from agentdojo.base_tasks import BaseUserTask
from agentdojo.functions_runtime import FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.task_suite import TaskSuite, read_suite_file, validate_injections
from agentdojo.types import get_text_content_as_str

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _memoize_email_validation() -> None:
    """pydantic checks every `EmailStr` with email_validator: a pure function of the string, yet half
    the cost of building a workspace environment (~200 addresses, the same ones every time).
    Memoized for this process. The equality test against agentdojo's loader covers it."""
    if not hasattr(pydantic.networks.validate_email, "cache_info"):
        pydantic.networks.validate_email = lru_cache(maxsize=65536)(pydantic.networks.validate_email)


_memoize_email_validation()


@cache
def vector_defaults(suite: TaskSuite) -> dict[str, str]:
    return suite.get_injection_vector_defaults()


def load_injected_environment(suite: TaskSuite, injections: dict[str, str]) -> TaskEnvironment:
    """The suite's default environment with `injections` (vector id → text) filled in."""
    defaults = vector_defaults(suite)
    validate_injections(injections, defaults)
    text = read_suite_file(suite.name, "environment.yaml", suite.data_path).format(
        **{**defaults, **injections}
    )
    return suite.environment_type.model_validate(yaml.load(text, Loader=_Loader))


@cache
def _canary_environment(suite: TaskSuite, canaries: tuple[tuple[str, str], ...]) -> bytes:
    return pickle.dumps(load_injected_environment(suite, dict(canaries)), protocol=pickle.HIGHEST_PROTOCOL)


@cache
def injection_candidates(attack: BaseAttack, user_task: BaseUserTask) -> list[str]:
    """The vectors the user task's ground truth shows the agent (agentdojo's definition, same canaries)."""
    canaries = attack.canary_injections
    environment = pickle.loads(_canary_environment(attack.task_suite, tuple(sorted(canaries.items()))))
    runtime = FunctionsRuntime(attack.task_suite.tools)
    _, _, _, messages, _ = GroundTruthPipeline(user_task).query(user_task.PROMPT, runtime, environment)
    seen = " ".join(get_text_content_as_str(m["content"]) for m in messages if m["content"] is not None)
    found = [vector for vector, canary in canaries.items() if canary in seen]
    if not found:
        raise ValueError(f"{user_task.ID} is not injectable.")
    return found


class EpisodeStart(Protocol):
    """What decides an episode's start environment (the catalog's `Resolved`)."""

    @property
    def suite(self) -> TaskSuite: ...
    @property
    def user_task(self) -> BaseUserTask: ...
    def injections(self) -> dict[str, str]: ...


def _overrides_init(user_task: BaseUserTask) -> bool:
    return type(user_task).init_environment is not BaseUserTask.init_environment


class StartCache:
    """LRU of pickled injected environments keyed by (suite, injections); `start_bytes` gives an episode's
    start."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def _injected(self, suite: TaskSuite, injections: dict[str, str]) -> bytes:
        key = (suite.name, hashlib.sha256(json.dumps(injections, sort_keys=True).encode()).hexdigest())
        with self._lock:
            blob = self._entries.get(key)
            if blob is not None:
                self._entries.move_to_end(key)
                return blob
        blob = pickle.dumps(load_injected_environment(suite, injections), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._entries[key] = blob
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return blob

    def start_bytes(self, episode: EpisodeStart) -> bytes:
        """The pickled environment the episode starts in: injected, then set up by the user task."""
        blob = self._injected(episode.suite, episode.injections())
        if not _overrides_init(episode.user_task):
            return blob
        return pickle.dumps(
            episode.user_task.init_environment(pickle.loads(blob)), protocol=pickle.HIGHEST_PROTOCOL
        )
