"""AgentDojo demonstrations for the warm-up: training user tasks solved by their ground truth at the service.

Every AgentDojo user task has `ground_truth(pre_environment)`, the function calls that solve it, and most a
`GROUND_TRUTH_OUTPUT`, the answer. Both are read with the `agentdojo` package on the suite's default
environment, at the benchmark version the service reports. The calls then run through the environment class
the RL loop uses (trl_environment.py: `reset` creates the episode, one tool method and one `/step` per call),
so the tool results, injections included, are what the policy reads in training, and `/finish` with the answer
scores the episode. A demonstration is the conversation TRL's environment loop would produce (one assistant
tool call per turn, its tool result, the answer last), kept only when it scores utility 1 (and security 1
under attack). Each user task is demonstrated without attack and under each configured injection task: there
the answer ignores the injection.

Split by user task, the authors' way (their agent_security_rl manifest): a user task is held out, never
demonstrated and evaluated on, when the first 8 hex digits of sha256("<suite>:<user_task>") / 2^32 < 0.2
(banking: 0 and 14); `python -m corrgrpo_trainer.agentdojo.demonstrations split` lists both halves.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corrgrpo_proto.agentdojo import TasksResponse

from ..config_shape import AgentDojoWarmup
from .trl_environment import AgentDojoEnvironment, ToolError
from .trl_inputs import agentdojo_episodes, task_rows

HELD_OUT_SHARE = 0.2
DONE = (
    "Done."  # the answer of a task whose ground truth has none (the service reads an empty answer the same)
)


def is_held_out(suite: str, user_task: str) -> bool:
    """Whether the user task is in the authors' held-out split (a stable hash of suite and task, 20%)."""
    return int(hashlib.sha256(f"{suite}:{user_task}".encode()).hexdigest()[:8], 16) / 2**32 < HELD_OUT_SHARE


def split(tasks: TasksResponse) -> dict[str, dict[str, list[str]]]:
    """{suite: {"train": [...], "held_out": [...]}} over every user task the service serves."""
    return {
        suite: {
            "train": [u for u in known.user_tasks if not is_held_out(suite, u)],
            "held_out": [u for u in known.user_tasks if is_held_out(suite, u)],
        }
        for suite, known in tasks.suites.items()
    }


@functools.cache
def ground_truth(version: str, suite: str, user_task: str) -> tuple[list[dict[str, Any]], str]:
    """The user task's ground-truth calls ({"function", "args"}, JSON values) and its answer, from
    agentdojo."""
    from agentdojo.task_suite.load_suites import get_suite

    task_suite = get_suite(version, suite)
    task = task_suite.get_user_task_by_id(user_task)
    calls = task.ground_truth(default_environment(version, suite))
    answer = task.GROUND_TRUTH_OUTPUT or DONE
    return [{"function": c.function, "args": json.loads(json.dumps(dict(c.args)))} for c in calls], answer


@functools.cache
def default_environment(version: str, suite: str) -> Any:
    from agentdojo.task_suite.load_suites import get_suite

    return get_suite(version, suite).load_and_inject_default_environment({})


def tool_schemas(env: AgentDojoEnvironment) -> list[dict[str, Any]]:
    """The tool schemas TRL renders for this environment: its public methods in TRL's order (by name)."""
    from transformers.utils import get_json_schema

    names = [
        n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not n.startswith("_")
    ]
    return [get_json_schema(getattr(env, n)) for n in names if n not in ("reset", "get_reward")]


@dataclass
class Demonstration:
    """One solved episode: the chat (system, user, assistant/tool turns, answer), the tools, and its
    scores."""

    row: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    components: dict[str, float]


def demonstrate(
    env: AgentDojoEnvironment, row: dict[str, Any], calls: Sequence[dict[str, Any]], answer: str
) -> Demonstration | str:
    """Run `calls` then `answer` in a fresh episode of `row`. The demonstration, or why it was rejected."""
    messages = [dict(row["prompt"][0]), {"role": "user", "content": env.reset(**row)}]
    for call in calls:
        call_message = {"type": "function", "function": {"name": call["function"], "arguments": call["args"]}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call_message]})
        try:
            content = getattr(env, call["function"])(**call["args"])
        except ToolError as error:
            env._finish("")  # close the episode
            return f"{call['function']} failed: {error}"
        messages.append({"role": "tool", "name": call["function"], "content": content})
    messages.append({"role": "assistant", "content": answer})
    result = env._finish(answer)
    if result is None:
        return "the service could not score it"
    if result.components["utility"] != 1.0 or (
        row["injection_task"] and result.components["security"] != 1.0
    ):
        return f"scored {result.components}"
    return Demonstration(row, messages, tool_schemas(env), result.components)


def build(config: AgentDojoWarmup) -> list[Demonstration]:
    """Demonstrations of the training user tasks the config's `dataset` selects (held-out ones left out), each
    without attack and under each configured injection task."""
    episodes = agentdojo_episodes(config)
    version = episodes.tasks.benchmark_version
    benign = task_rows(episodes.tasks, config.dataset.model_copy(update={"injection_tasks": None}))
    demonstrations, rejected = [], []
    for row in benign + [row for row in episodes.rows if row["injection_task"] is not None]:
        if is_held_out(row["suite"], row["user_task"]):
            continue
        calls, answer = ground_truth(version, row["suite"], row["user_task"])
        made = demonstrate(episodes.factories[row["suite"]](), row, calls, answer)
        if isinstance(made, Demonstration):
            demonstrations.append(made)
        else:
            rejected.append(f"{row['suite']}/{row['user_task']}/{row['injection_task']}: {made}")
    print(f"[demonstrations] {len(demonstrations)} solved episodes; {len(rejected)} rejected", flush=True)
    for reason in rejected:
        print(f"[demonstrations] rejected {reason}", flush=True)
    return demonstrations


def demonstration_rows(config: AgentDojoWarmup) -> list[dict[str, Any]]:
    """SFT rows `{"messages", "tools" (JSON text)}` of the config's training episodes."""
    return [{"messages": d.messages, "tools": json.dumps(d.tools)} for d in build(config)]


def main(argv: Sequence[str] | None = None) -> int:
    """`split --url U`: each suite's training and held-out user tasks, as JSON."""
    from corrgrpo_proto import RewardClient

    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_trainer.agentdojo.demonstrations", description=main.__doc__
    )
    parser.add_argument("command", choices=["split"])
    parser.add_argument(
        "--url", default="http://127.0.0.1:8103", help="the AgentDojo service (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    tasks = TasksResponse.model_validate(RewardClient(args.url).request("GET", "/v1/tasks"))
    print(json.dumps(split(tasks), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
