"""`python -m corrgrpo_trainer train|sft|advantages|rollout`: train against the services, advantages for other stacks.

train       --config trainer/configs/<domain>.yaml [--model M] [--max-steps N] [--output-dir D]
sft         --config trainer/configs/<domain>_sft.yaml [--model M] [--max-steps N] [--output-dir D]   the warm-up
advantages  --input rewards.json [--estimator corrgrpo|grpo|gdpo|all] [--output out.json]
rollout     --config trainer/configs/agentdojo.yaml [--episodes N]   multi-turn AgentDojo episodes
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from corrgrpo_proto import AsyncRewardClient, RewardClient, RewardServiceError, RewardServiceUnavailable
from corrgrpo_proto.agentdojo import EpisodeSpec, TasksResponse

from .advantages import ESTIMATORS, diagnostics
from .agentdojo_env import agentdojo_episodes
from .models import EMBEDDED, TINY, PolicyLoadError, load_pretrained
from .rewards import ServiceRewards, reward_columns
from .rollouts import run_episode

# ---------------------------------------------------------------- advantages


class InputError(ValueError):
    """Malformed command-line input; main() prints it as one line and exits 2."""


class ServicesDown(RuntimeError):
    """A configured service does not answer; main() prints it as one line and exits 2."""


MAX_NESTING = 4  # {"rewards": [B][G][K]}: an object around three lists; anything deeper is not this input


def _number(value: Any, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number or null, got {json.dumps(value)[:40]}")
    if not math.isfinite(number := float(value)):
        raise InputError(f"{where}: a number too large for a 64-bit float (expected a finite number or null)")
    return number


def parse_rewards(raw: Any) -> list[list[list[float]]]:
    """A rectangular [B][G][K] list of numbers (null = missing, NaN), or InputError naming the first bad place."""
    shape: list[int | None] = [None, None]

    def rows(value: Any, where: str, level: int) -> list[Any]:
        what = ("groups [B]", "rollouts [G] of a group", "components [K] of a rollout")[level]
        if not isinstance(value, list) or not value:
            raise InputError(f"{where}: expected a non-empty list of {what}, got {json.dumps(value)[:40]}")
        if level and shape[level - 1] not in (None, len(value)):
            raise InputError(f"{where}: {len(value)} {what.split()[0]}, the first had {shape[level - 1]} (ragged)")
        if level:
            shape[level - 1] = len(value)
        return value

    return [
        [
            [_number(v, f"rewards[{b}][{g}][{k}]") for k, v in enumerate(rows(rollout, f"rewards[{b}][{g}]", 2))]
            for g, rollout in enumerate(rows(group, f"rewards[{b}]", 1))
        ]
        for b, group in enumerate(rows(raw, "rewards", 0))
    ]


def load_rewards(payload: Any) -> tuple[torch.Tensor, list[float] | None, list[str] | None]:
    """Rewards [B][G][K] (null = missing) from a nested list or {"rewards", "weights"?, "names"?}."""
    if isinstance(payload, dict) and "rewards" not in payload:
        raise InputError('expected a [B][G][K] list or an object with "rewards" (and optional "weights", "names")')
    body = payload if isinstance(payload, dict) else {"rewards": payload}
    rewards = torch.tensor(parse_rewards(body["rewards"]), dtype=torch.float64)
    weights, names = body.get("weights"), body.get("names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InputError("names: expected a list of strings")
    if isinstance(weights, dict):
        names = names or list(weights)
        missing = [n for n in names if n not in weights]
        if missing:
            raise InputError(f"weights: no weight for {missing}")
        weights = [weights[n] for n in names]
    if weights is not None:
        if not isinstance(weights, list):
            raise InputError(f"weights: expected a list of K numbers or {{name: weight}}, got {json.dumps(weights)[:40]}")
        weights = [_number(w, f"weights[{i}]") for i, w in enumerate(weights)]
    for label, values in (("weights", weights), ("names", names)):
        if values is not None and len(values) != rewards.shape[-1]:
            raise InputError(f"{len(values)} {label} for K = {rewards.shape[-1]} components")
    return rewards, weights, names


def compute_advantages(payload: Any, estimators: Sequence[str]) -> dict[str, Any]:
    """{"advantages": {estimator: [B][G]}, "diagnostics": {...}}; each estimator applies the weights its own way."""
    rewards, weights, names = load_rewards(payload)
    advantages = {name: ESTIMATORS[name](rewards, weights).tolist() for name in estimators}
    return {"shape": list(rewards.shape), "advantages": advantages, "diagnostics": diagnostics(rewards, weights, names=names)}


def nesting(value: Any) -> int:
    """How deep lists and objects nest in `value` (a number: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _no_constant(name: str) -> None:
    raise InputError(f"{name} is not a JSON number (a missing reward is null)")


def read_json(source: str) -> Any:
    """The JSON in a file ("-" = stdin), or InputError with the reason: unreadable, not UTF-8, not strict JSON
    (NaN, Infinity), or nested deeper than the input can be (the parser's recursion is never the limit)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{source} is not UTF-8 text: {error.reason} at byte {error.start}") from None
    too_deep = InputError(f'{source}: nested deeper than {MAX_NESTING} levels (expected [B][G][K] or {{"rewards": [B][G][K]}})')
    try:
        # Integers as floats: a 5,000-digit integer is then a number too large (not Python's digit-limit message).
        payload = json.loads(text, parse_int=float, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise InputError(f"{source} is not JSON: {error}") from None
    except InputError as error:
        raise InputError(f"{source}: {error}") from None
    except RecursionError:
        raise too_deep from None
    if nesting(payload) > MAX_NESTING:
        raise too_deep
    return payload


def strict_json(value: Any) -> Any:
    """NaN and ±inf as null: JSON has no such numbers, and other stacks' parsers refuse Python's `NaN`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [strict_json(item) for item in value]
    return value


def advantages_command(args: argparse.Namespace) -> int:
    payload = read_json(args.input)
    estimators = list(ESTIMATORS) if args.estimator == "all" else [args.estimator]
    text = json.dumps(strict_json(compute_advantages(payload, estimators)), indent=2, allow_nan=False)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n")
        except OSError as error:
            raise InputError(f"cannot write {args.output}: {error.strerror or error}") from None
    else:
        print(text)
    return 0


# ---------------------------------------------------------------- datasets


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def code_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """LeetCodeDataset records: the `query` as the user prompt, the problem inline (the service needs nothing loaded)."""
    rows = []
    for record in _read_jsonl(spec["path"])[: spec.get("limit")]:
        problem = {key: record[key] for key in ("task_id", "prompt", "entry_point", "test")} | {"reference": record["completion"]}
        rows.append({"prompt": [{"role": "user", "content": record["query"]}], "problem": problem})
    return rows


def toolcall_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """RLLA-4K (ToolRL) parquet: its chat prompt and `reward_model.ground_truth`."""
    import pandas as pd

    frame = pd.read_parquet(spec["path"]).head(spec.get("limit"))
    return [
        {"prompt": [dict(m) for m in row.prompt], "ground_truth": row.reward_model["ground_truth"]} for row in frame.itertuples()
    ]


def with_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with the tool schemas and the call format appended to the system message (templates without tools work)."""
    note = (
        '\n\nTools (call them as <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>, one JSON per line):\n'
        + "\n".join(json.dumps(tool) for tool in tools)
    )
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = str(messages[0]["content"]) + note
    else:
        messages.insert(0, {"role": "system", "content": note.strip()})
    return messages


def load_rows(config: dict[str, Any]) -> list[dict[str, Any]]:
    domain, spec = config["domain"], config["dataset"]  # agentdojo: its environments bring their rows (agentdojo_env.py)
    return {"code": code_rows, "toolcall": toolcall_rows}[domain](spec)


# ---------------------------------------------------------------- policy and training


def load_policy(model: str, output_dir: str) -> tuple[Any, Any]:
    """(model, tokenizer): "tiny" builds the local tiny policy; anything else is resolved by models.load_pretrained
    (the embedded default, a local checkpoint or a hub id; bf16 on GPU)."""
    if model == TINY:
        from .tiny import build_tiny_policy

        return build_tiny_policy(Path(output_dir) / "tiny-policy")
    return load_pretrained(model, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)


START_SERVICES = "start the services with `python -m corrgrpo_service up` (local processes) or `docker compose up -d`"


def check_services(config: dict[str, Any]) -> None:
    """Every configured service answers `/healthz` at once, or ServicesDown naming each URL that did not (so a
    missing service is said in one line before a model is loaded, not after retries as a traceback)."""
    down = []
    for name, spec in config["services"].items():
        url = spec["url"]
        with RewardClient(url, retries=0, timeout=10) as client:
            try:
                client.request("GET", "/healthz")
            except RewardServiceUnavailable as error:
                down.append(f"the {name} service at {url} ({error.reason})")
            except RewardServiceError as error:
                down.append(f"the {name} service at {url} (/healthz: HTTP {error.status}, not a corrgrpo service?)")
    if down:
        raise ServicesDown(" ".join(f"no answer from {', '.join(down)}; {START_SERVICES}".split()))


def service_rewards(config: dict[str, Any]) -> tuple[list[ServiceRewards], list[float]]:
    """One ServiceRewards per configured service (components default to all it declares) and TRL's reward weights."""
    services, weights = [], []
    for name, spec in config["services"].items():
        declared = {
            c.name: c.weight
            for c in RewardClient(spec["url"], retries=spec.get("client", {}).get("retries", 4)).components().components
        }
        components = spec.get("components") or list(declared)
        if unknown := sorted(set(components) - set(declared)):
            raise ValueError(f"{name}: components {unknown} not served at {spec['url']} (it has {sorted(declared)})")
        services.append(
            ServiceRewards(name, spec["url"], components, prefix=spec.get("prefix", ""), client_options=spec.get("client"))
        )
        weights += [float(spec.get("weights", {}).get(c, declared[c])) for c in components]
    return services, weights


def component_table(log_history: list[dict[str, Any]], names: Sequence[str]) -> str:
    """Steps × components of TRL's `rewards/<name>/mean`, plus the total reward."""
    header = ["step", *names, "reward"]
    lines = ["  ".join(f"{h:>12s}" for h in header)]
    for entry in log_history:
        if "reward" not in entry:
            continue
        values = [entry.get(f"rewards/{n}/mean", math.nan) for n in names] + [entry["reward"]]
        lines.append(f"{entry.get('step', 0):>12d}  " + "  ".join(f"{v:12.4f}" for v in values))
    return "\n".join(lines)


def progress_line(step: int, max_steps: int, logs: dict[str, float], names: Sequence[str]) -> str:
    """One step: total reward, each component's mean, the zero-variance group fraction and mean |advantage|."""
    from .trl_trainer import ABS_ADVANTAGE

    parts = "  ".join(f"{name}={logs.get(f'rewards/{name}/mean', math.nan):.3f}" for name in names)
    return (
        f"[train] step {step}/{max_steps}  reward={logs['reward']:.3f}  {parts}  "
        f"zero_std_groups={logs.get('frac_reward_zero_std', math.nan):.2f}  |A|={logs.get(ABS_ADVANTAGE, math.nan):.3f}"
    )


def train(config: dict[str, Any], rows: list[dict[str, Any]] | None = None, progress: bool = True) -> Any:
    """Build the policy, the reward columns and a CorrGRPOTrainer from `config`, train, and return the trainer.

    `rows` (prompt plus the columns the item builder reads) replace the config's dataset when given.
    Every logged step is appended to `<output_dir>/metrics.jsonl` (TRL's metrics, the estimator's
    diagnostics, `model/params`). Every configured service is checked first (ServicesDown), before the heavy imports.
    """
    check_services(config)
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback

    from .trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

    trl_args = dict(config.get("trl", {}))
    trl_args.setdefault("output_dir", f"trainer_out/{config['domain']}")
    # AgentDojo trains multi-turn (agentdojo_env.py): its environments bring their rows and reward columns
    episodes = agentdojo_episodes(config)
    if episodes is not None:
        columns, weights = episodes.columns, episodes.weights
    else:
        services, weights = service_rewards(config)
        columns = reward_columns(services)
    name = config.get("model", EMBEDDED)
    model, tokenizer = load_policy(name, trl_args["output_dir"])
    # Small matrices on a loaded CPU: one thread avoids synchronisation stalls (tiny policy: 17x faster generation).
    threads = config.get("torch_threads", 1 if name == TINY else None)
    if threads and not torch.cuda.is_available():
        torch.set_num_threads(threads)
    args = CorrGRPOConfig(
        advantage_estimator=config.get("estimator", "corrgrpo"),
        advantage_floor=config.get("advantage_floor"),
        reward_weights=weights,
        bf16=torch.cuda.is_available() and name != TINY,
        **trl_args,
    )
    metrics_path = Path(args.output_dir) / "metrics.jsonl"
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text("")
    params = sum(p.numel() for p in model.parameters())

    class StepLog(TrainerCallback):
        """Appends each logged step to metrics.jsonl and (with progress) prints its line."""

        def on_log(self, _args: Any, state: Any, _control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if not logs or "reward" not in logs or not state.is_world_process_zero:
                return
            with metrics_path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs, "model/params": params}) + "\n")
            if progress:
                print(progress_line(state.global_step, state.max_steps, logs, [c.__name__ for c in columns]), flush=True)

    trainer = CorrGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=columns,
        args=args,
        train_dataset=Dataset.from_list(rows if rows is not None else episodes.rows if episodes else load_rows(config)),
        **(episodes.trainer_kwargs(tokenizer) if episodes else {}),
        callbacks=[StepLog()],
    )
    if progress:
        trainer.remove_callback(PrinterCallback)  # its raw log dicts would drown the progress lines
    trainer.train()
    if progress:
        print(component_table(trainer.state.log_history, [c.__name__ for c in columns]))
        print(f"[train] metrics of every step: {metrics_path}")
    return trainer


def read_config(path: str, overrides: argparse.Namespace, required: Sequence[str] = ("domain", "services")) -> dict[str, Any]:
    """The YAML config with the command line's overrides applied."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise InputError(f"cannot read the config {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(config, dict) or any(key not in config for key in required):
        keys = " and ".join(f"`{key}`" for key in required)
        raise InputError(f"{path}: expected a mapping with at least {keys} (see trainer/configs/)")
    if overrides.model:
        config["model"] = overrides.model
    if getattr(overrides, "max_steps", None):
        config.setdefault("trl", {})["max_steps"] = overrides.max_steps
    if getattr(overrides, "output_dir", None):
        config.setdefault("trl", {})["output_dir"] = overrides.output_dir
    return config


def train_command(args: argparse.Namespace) -> int:
    train(read_config(args.config, args))
    return 0


def sft_command(args: argparse.Namespace) -> int:
    from .sft import sft  # imports this module

    sft(read_config(args.config, args, required=("domain", "dataset")))
    return 0


# ---------------------------------------------------------------- multi-turn agentdojo rollouts


def rollout_command(args: argparse.Namespace) -> int:
    """Run multi-turn episodes with the configured policy and print utility/security per episode."""
    config = read_config(args.config, args)
    check_services(config)
    model, tokenizer = load_policy(
        config.get("model", EMBEDDED), config.get("trl", {}).get("output_dir", "trainer_out/agentdojo")
    )
    max_new_tokens = config.get("trl", {}).get("max_completion_length", 128)

    async def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        ids = tokenizer.apply_chat_template(
            with_tools(messages, tools), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        out = model.generate(**ids.to(model.device), max_new_tokens=max_new_tokens, do_sample=True)
        return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)

    async def episodes() -> None:
        spec = config["dataset"]
        async with AsyncRewardClient(config["services"]["agentdojo"]["url"]) as client:
            tasks = TasksResponse.model_validate(await client.request("GET", "/v1/tasks"))
            suite = (spec.get("suites") or list(tasks.suites))[0]
            for user_task in tasks.suites[suite].user_tasks[: args.episodes]:
                episode = EpisodeSpec(suite=suite, user_task=user_task, injection_task=(spec.get("injection_tasks") or [None])[0])
                result = await run_episode(client, episode, generate, max_turns=spec.get("max_turns", 4))
                print(f"[rollout] {suite}/{user_task}  " + "  ".join(f"{k}={v:.0f}" for k, v in result.components.items()))

    asyncio.run(episodes())
    return 0


COMMANDS = {
    "train": "train a policy with CorrGRPO/GRPO/GDPO against running reward services (TRL)",
    "sft": "supervised warm-up on tool-call demonstrations before RL (TRL's SFTTrainer), writing a checkpoint",
    "rollout": "run multi-turn AgentDojo episodes with a policy and print utility/security",
    "advantages": "advantages and diagnostics of a [B][G][K] reward JSON, for other stacks (torch only)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_trainer",
        description="The corrgrpo trainer: train against the reward services, run AgentDojo episodes, "
        "compute advantages for other stacks.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, handler in (("train", train_command), ("sft", sft_command), ("rollout", rollout_command)):
        command = commands.add_parser(name, help=COMMANDS[name], description=COMMANDS[name])
        command.add_argument("--config", required=True, help="YAML config, e.g. trainer/configs/<domain>.yaml (required)")
        command.add_argument(
            "--model",
            help=f"{EMBEDDED!r} (embedded SmolLM2-135M-Instruct), {TINY!r} (random, for tests), a local checkpoint "
            "directory or a hub id (default: the config's `model`)",
        )
        command.set_defaults(handler=handler)
    rollout_parser = commands.choices["rollout"]
    for train_parser in (commands.choices["train"], commands.choices["sft"]):
        train_parser.add_argument("--max-steps", type=int, help="training steps (default: the config's trl.max_steps)")
        train_parser.add_argument(
            "--output-dir", help="where checkpoints and metrics.jsonl go (default: the config's trl.output_dir)"
        )
    rollout_parser.add_argument(
        "--episodes", type=int, default=2, help="user tasks of the first configured suite (default: %(default)s)"
    )
    adv = commands.add_parser("advantages", help=COMMANDS["advantages"], description=COMMANDS["advantages"])
    adv.add_argument(
        "--input", required=True, help='JSON file ("-" = stdin): [B][G][K] or {"rewards", "weights", "names"} (required)'
    )
    adv.add_argument(
        "--estimator", choices=[*ESTIMATORS, "all"], default="corrgrpo", help="which advantages (default: %(default)s)"
    )
    adv.add_argument("--output", help="write the JSON to this file (default: stdout); undefined numbers are null")
    adv.set_defaults(handler=advantages_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (InputError, PolicyLoadError, ServicesDown) as error:
        parser.exit(2, f"{parser.prog} {args.command}: error: {error}\n")
