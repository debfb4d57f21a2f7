"""Multi-turn AgentDojo for TRL's GRPOTrainer: the policy calls the suite's tools and reads their results.

TRL 1.16's `environment_factory` gives every rollout its own environment instance; its public
methods are the tools (TRL renders their signatures and docstrings into the chat template and
calls them when the policy emits a tool call), `reset(**row)` starts it and returns text appended
to the prompt, and reward functions receive the instances as `environments=`. Here each instance
is one episode of the AgentDojo service, reached only over HTTP through `corrgrpo_proto`'s client:

- `reset` creates the episode (`POST /v1/episodes`) for the row's suite, user task, injection task
  and attack and returns the user task's prompt (the row's prompt holds agentdojo's system message);
- each tool method is built from the service's tool schema (name, parameters, description) and
  runs one `POST .../step`; the result text (injections included) is what the policy reads next.
  A failed call raises `ToolError` with the service's error text: TRL shows it to the policy as
  the tool's result and counts it in `tools/failure_frequency`; the training step goes on;
- the reward columns `utility` and `security` call `POST .../finish` once per rollout with the
  last assistant message (the service reads the answer out of it) and give the two components.
  An episode whose finish fails scores None (missing) and is left to expire.

One environment class per suite (the suites' tools differ); rows select theirs by an
`environment` column, TRL's multi-environment form. Timing of every service call is kept in
`ServiceClock`, so a run can say how much of a step the service took.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union
from urllib.parse import urlencode

from corrgrpo_proto import RewardClient, RewardServiceError, RewardServiceUnavailable
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishResponse, StepResponse, TasksResponse

COMPONENTS = ("utility", "security")
SPEC_KEYS = ("suite", "user_task", "injection_task", "attack")
QWEN_TOOL_TEMPLATE = "qwen2_5.jinja"  # TRL ships it and knows how to parse its <tool_call> blocks


class ToolError(RuntimeError):
    """A tool call that did not run: TRL turns it into the tool's result `{"error": message}`."""


# ---------------------------------------------------------------- tool methods from JSON schemas

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def type_hint(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    """The Python type hint transformers' `get_json_schema` turns back into `schema` (the subset agentdojo uses)."""
    if "$ref" in schema:
        return type_hint(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if "anyOf" in schema:
        return Union[tuple(type_hint(option, definitions) for option in schema["anyOf"])]  # noqa: UP007
    kind = schema.get("type")
    if kind == "array":
        return list[type_hint(schema["items"], definitions)] if "items" in schema else list
    if kind == "null":
        return type(None)
    return _JSON_TYPES.get(kind, Any)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def tool_method(tool: dict[str, Any]) -> Callable[..., str]:
    """A method named after the tool whose signature, type hints and Google-style docstring describe its
    parameters (what TRL renders into the prompt); calling it runs the tool in the episode."""
    function = tool["function"]
    name, parameters = function["name"], function.get("parameters", {})
    properties, required = parameters.get("properties", {}), set(parameters.get("required", []))
    definitions = parameters.get("$defs", {})

    def call(self: AgentDojoEnvironment, **arguments: Any) -> str:
        return self._run_tool(name, arguments)

    hints = {arg: type_hint(schema, definitions) for arg, schema in properties.items()}
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            arg, inspect.Parameter.KEYWORD_ONLY, annotation=hint, default=inspect.Parameter.empty if arg in required else None
        )
        for arg, hint in hints.items()
    ]
    args_doc = "".join(
        f"\n    {arg}: {_one_line(schema.get('description') or schema.get('title') or arg)}" for arg, schema in properties.items()
    )
    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    call.__annotations__ = {**hints, "return": str}
    call.__doc__ = _one_line(function.get("description") or name) + (f"\n\nArgs:{args_doc}" if args_doc else "")
    return call


# ---------------------------------------------------------------- the environment


@dataclass
class ServiceClock:
    """Every service call's (start, end) by kind (create, step, finish): time spent and overlap, for measurements."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {"create": [], "step": [], "finish": []})
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, kind: str, start: float, end: float) -> None:
        with self.lock:
            self.spans[kind].append((start, end))

    def seconds(self, kind: str) -> float:
        return sum(end - start for start, end in self.spans[kind])

    def max_overlap(self, kind: str) -> int:
        """The most calls of `kind` in flight at one moment (1: they ran one after another)."""
        events = sorted([(start, 1) for start, _ in self.spans[kind]] + [(end, -1) for _, end in self.spans[kind]])
        depth = best = 0
        for _, change in events:
            depth += change
            best = max(best, depth)
        return best


@dataclass
class EpisodeLog:
    """Every finished rollout: its spec and reward vector (evaluation reads it)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, spec: dict[str, Any], result: FinishResponse | None) -> None:
        """The episode's components (None when unscored) and the injection checker's own verdict: an invalid
        trajectory scores security 0 whether or not the injection's goal was met."""
        components = result.components if result else None
        succeeded = result.info.get("injection_succeeded") if result else None
        with self.lock:
            self.rows.append({**spec, "components": components, "injection_succeeded": succeeded})


class AgentDojoEnvironment:
    """One rollout's AgentDojo episode; `environment_class(suite, ...)` adds the suite's tools as methods.

    TRL treats every public method but `reset` as a tool: everything else here is private."""

    suite: str
    client: RewardClient  # create/finish: retried (idempotent enough: a lost create leaves an episode to expire)
    step_client: RewardClient  # steps are not idempotent: never retried
    clock: ServiceClock
    log: EpisodeLog

    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.spec: dict[str, Any] = {}
        self._result: FinishResponse | None = None
        self._finish_lock = threading.Lock()

    def _timed(self, kind: str, client: RewardClient, path: str, body: dict[str, Any]) -> Any:
        start = time.perf_counter()
        try:
            return client.request("POST", path, body)
        finally:
            self.clock.record(kind, start, time.perf_counter())

    def reset(self, **row: Any) -> str:
        """Create the row's episode; the user task's prompt is appended to the (empty) last user message."""
        spec = EpisodeSpec(**{key: row.get(key) for key in SPEC_KEYS})
        if spec.suite != self.suite:
            raise ValueError(f"a {spec.suite} row reached the {self.suite} environment")
        episode = Episode.model_validate(self._timed("create", self.client, "/v1/episodes", spec.model_dump(exclude_none=True)))
        self.episode_id, self._result = episode.episode_id, None
        self.spec = {key: getattr(episode, key) for key in SPEC_KEYS}  # as the service resolved it (default attack named)
        return str(episode.messages[-1]["content"])

    def _run_tool(self, function: str, arguments: dict[str, Any]) -> str:
        """Run one tool call in the episode; its result text, or ToolError with the text the policy should see."""
        if self.episode_id is None:
            raise ToolError("no episode: reset() did not run")
        body = {"tool_calls": [{"function": function, "args": arguments}]}
        try:
            answer = self._timed("step", self.step_client, f"/v1/episodes/{self.episode_id}/step", body)
        except RewardServiceError as error:  # refused (e.g. too many calls, an argument too long): the policy's doing
            raise ToolError(error.message) from None
        except RewardServiceUnavailable as error:
            raise ToolError(f"the tool could not be reached: {error}") from None
        (result,) = StepResponse.model_validate(answer).results
        if result.error is not None:
            raise ToolError(result.content)
        return result.content

    def _finish(self, completion: str) -> FinishResponse | None:
        """Close the episode once (later calls return the same result); None when the service cannot score it."""
        with self._finish_lock:
            if self._result is None and self.episode_id is not None:
                path = f"/v1/episodes/{self.episode_id}/finish"
                try:
                    self._result = FinishResponse.model_validate(
                        self._timed("finish", self.client, path, {"completion": completion})
                    )
                except (RewardServiceError, RewardServiceUnavailable):
                    self._result = None  # left to expire; the rollout's rewards are missing
                self.log.add(self.spec, self._result)
                self.episode_id = None
            return self._result


def environment_class(
    suite: str,
    tools: Sequence[dict[str, Any]],
    client: RewardClient,
    step_client: RewardClient,
    clock: ServiceClock,
    log: EpisodeLog,
) -> type[AgentDojoEnvironment]:
    """A subclass of AgentDojoEnvironment whose public methods are `suite`'s tools."""
    methods = {tool["function"]["name"]: tool_method(tool) for tool in tools}
    clash = sorted(name for name in methods if name in ("reset", "get_reward") or name.startswith("_"))
    if clash:
        raise ValueError(f"{suite}: tools {clash} clash with the environment's own methods")
    attributes = {"suite": suite, "client": client, "step_client": step_client, "clock": clock, "log": log, **methods}
    return type(f"AgentDojo_{suite}", (AgentDojoEnvironment,), attributes)


def last_assistant_text(completion: Any) -> str:
    """The last assistant message's text of a TRL completion (a string, or a list of chat messages)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            return content if isinstance(content, str) else " ".join(str(part.get("text", "")) for part in content)
    return ""


def reward_column(component: str) -> Callable[..., Any]:
    """TRL reward function `component`: finishes each rollout's episode (once, shared by both columns)."""

    async def column(completions: list[Any], environments: list[AgentDojoEnvironment], **_: Any) -> list[float | None]:
        results = await asyncio.gather(
            *(asyncio.to_thread(env._finish, last_assistant_text(c)) for env, c in zip(environments, completions, strict=True))
        )
        return [None if result is None else result.components[component] for result in results]

    column.__name__ = column.__qualname__ = component
    return column


# ---------------------------------------------------------------- rows and trainer wiring


def task_rows(tasks: TasksResponse, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Dataset rows (one per episode spec) from the config's `dataset` section.

    `suites` (default: all), `user_tasks` (names; default all) or `user_tasks_per_suite` (the first N),
    `injection_tasks` (names, `all`, or empty/null for no attack), `attack`, and `exclude_unearned`
    (default true: leave out user tasks whose utility the service flags as earned without work).
    """
    rows = []
    for suite in spec.get("suites") or list(tasks.suites):
        known = tasks.suites[suite]
        unearned = {task for flagged in known.utility_without_work.values() for task in flagged}
        users = [
            u for u in (spec.get("user_tasks") or known.user_tasks) if not (spec.get("exclude_unearned", True) and u in unearned)
        ]
        users = users[: spec.get("user_tasks_per_suite")]
        injections = spec.get("injection_tasks") or [None]
        injections = known.injection_tasks if injections == "all" else injections
        for user_task in users:
            for injection_task in injections:
                rows.append(
                    {
                        "prompt": [{"role": "system", "content": tasks.system_message}, {"role": "user", "content": ""}],
                        "environment": suite,
                        "suite": suite,
                        "user_task": user_task,
                        "injection_task": injection_task,
                        "attack": spec.get("attack") if injection_task else None,
                    }
                )
    return rows


def tool_calling_template(tokenizer: Any) -> None:
    """Give a tokenizer whose chat template cannot render tool calls TRL's Qwen2.5 template (ChatML with
    `<tool_call>` blocks, which TRL knows how to parse). ChatML tokenizers (SmolLM2, the tiny policy) fit it."""
    from trl.chat_template_utils import supports_tool_calling

    if supports_tool_calling(tokenizer):
        return
    import trl

    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / QWEN_TOOL_TEMPLATE).read_text()


@dataclass
class AgentDojoEpisodes:
    """What GRPOTrainer needs for multi-turn AgentDojo: rows, reward columns and weights, environment factories."""

    tasks: TasksResponse
    rows: list[dict[str, Any]]
    columns: list[Callable[..., Any]]
    weights: list[float]
    factories: dict[str, type[AgentDojoEnvironment]]
    clock: ServiceClock
    log: EpisodeLog

    def trainer_kwargs(self, tokenizer: Any) -> dict[str, Any]:
        """Extra GRPOTrainer arguments; fits the tokenizer's chat template for tool calls in place."""
        tool_calling_template(tokenizer)
        return {"environment_factory": dict(self.factories)}


def agentdojo_episodes(config: dict[str, Any]) -> AgentDojoEpisodes | None:
    """Multi-turn AgentDojo parts for an `agentdojo` config (None for other domains), read from the service."""
    if config.get("domain") != "agentdojo":
        return None
    service = config["services"]["agentdojo"]
    options = {
        "timeout": 120.0,
        **{k: v for k, v in (service.get("client") or {}).items() if k in ("timeout", "retries", "token")},
    }
    client = RewardClient(service["url"], **options)
    step_client = RewardClient(service["url"], **{**options, "retries": 0})
    dataset = config.get("dataset") or {}
    query = urlencode([("suite", suite) for suite in dataset.get("suites") or []])  # probed per suite: ask for ours
    tasks = TasksResponse.model_validate(client.request("GET", f"/v1/tasks?{query}" if query else "/v1/tasks"))
    rows = task_rows(tasks, dataset)
    if not rows:
        raise ValueError("the agentdojo dataset section selects no episodes")
    clock, log = ServiceClock(), EpisodeLog()
    suites = sorted({row["suite"] for row in rows})
    factories = {suite: environment_class(suite, tasks.suites[suite].tools, client, step_client, clock, log) for suite in suites}
    weights = service.get("weights") or {}
    components = service.get("components") or list(COMPONENTS)
    return AgentDojoEpisodes(
        tasks=tasks,
        rows=rows,
        columns=[reward_column(c) for c in components],
        weights=[float(weights.get(c, 1.0)) for c in components],
        factories=factories,
        clock=clock,
        log=log,
    )


# ---------------------------------------------------------------- evaluation (the paper's metrics)


def paper_metrics(log: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Utility without attack, utility under attack and attack success rate (ASR = share of attacked
    episodes whose injection goal was met) over the finished episodes; unscored ones are counted apart."""
    scored = [row for row in log if row["components"] is not None]
    benign = [row["components"]["utility"] for row in scored if row["injection_task"] is None]
    attacked = [row["components"] for row in scored if row["injection_task"] is not None]

    def mean(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "utility_without_attack": mean(benign),
        "utility_under_attack": mean([c["utility"] for c in attacked]),
        "attack_success_rate": mean([float(row["injection_succeeded"]) for row in scored if row["injection_task"] is not None]),
        "episodes": {"without_attack": len(benign), "under_attack": len(attacked), "unscored": len(log) - len(scored)},
    }


def metrics_table(metrics: dict[str, Any]) -> str:
    def cell(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    counts = metrics["episodes"]
    return "\n".join(
        [
            "| metric | value | episodes |",
            "|---|---|---|",
            f"| utility without attack | {cell(metrics['utility_without_attack'])} | {counts['without_attack']} |",
            f"| utility under attack | {cell(metrics['utility_under_attack'])} | {counts['under_attack']} |",
            f"| attack success rate | {cell(metrics['attack_success_rate'])} | {counts['under_attack']} |",
        ]
    )


def evaluate(config: dict[str, Any], output: str | None = None) -> dict[str, Any]:
    """Run every configured episode once with the policy through TRL's multi-turn loop (the trainer's
    `evaluate`, no update) under the config's `dataset`, plus the same user tasks without attack;
    print the paper's metrics as a table and write them (with every episode) as JSON to `output`."""
    from datasets import Dataset

    from .cli import load_policy
    from .trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

    dataset = dict(config.get("dataset") or {})
    attacked = agentdojo_episodes({**config, "dataset": dataset})
    assert attacked is not None
    benign = task_rows(attacked.tasks, {**dataset, "injection_tasks": None})
    rows = benign + [row for row in attacked.rows if row["injection_task"] is not None]
    trl_args = {k: v for k, v in (config.get("trl") or {}).items() if k != "max_steps"}
    trl_args.setdefault("output_dir", "trainer_out/agentdojo-eval")
    model, tokenizer = load_policy(config.get("model", "tiny"), trl_args["output_dir"])
    # one generation per episode; the train-side sizes only have to be valid
    trl_args |= {"num_generations": 2, "per_device_train_batch_size": 2, "num_generations_eval": 1, "report_to": "none"}
    trl_args.setdefault("per_device_eval_batch_size", 4)
    args = CorrGRPOConfig(**trl_args)
    trainer = CorrGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=attacked.columns,
        args=args,
        train_dataset=Dataset.from_list(rows),
        **attacked.trainer_kwargs(tokenizer),
    )
    trainer.evaluate(eval_dataset=Dataset.from_list(rows))
    metrics = paper_metrics(attacked.log.rows)
    print(metrics_table(metrics))
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps({**metrics, "log": attacked.log.rows}, indent=2) + "\n")
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m corrgrpo_trainer.agentdojo_env eval --config trainer/configs/agentdojo.yaml [--output eval.json]`."""
    from .cli import InputError, PolicyLoadError, ServicesDown, check_services, read_config

    parser = argparse.ArgumentParser(prog="python -m corrgrpo_trainer.agentdojo_env", description=evaluate.__doc__)
    parser.add_argument("command", choices=["eval"], help="the paper's metrics over the config's episodes")
    parser.add_argument("--config", required=True, help="YAML config, e.g. trainer/configs/agentdojo.yaml (required)")
    parser.add_argument("--model", help="overrides the config's `model` (default: the config's)")
    parser.add_argument(
        "--output", default="trainer_out/agentdojo-eval/metrics.json", help="metrics JSON written here (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        config = read_config(args.config, args)
        check_services(config)  # before the policy loads
        evaluate(config, args.output)
    except (InputError, PolicyLoadError, ServicesDown) as error:
        parser.exit(2, f"{parser.prog} {args.command}: error: {error}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
