"""`python -m corrgrpo_trainer train|advantages|rollout`: train against the services, advantages for other stacks.

train       --config trainer/configs/<domain>.yaml [--model M] [--max-steps N]
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

from corrgrpo_proto import AsyncRewardClient, RewardClient
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, TasksResponse

from .advantages import ESTIMATORS, diagnostics
from .rewards import ServiceRewards, reward_columns
from .rollouts import run_episode

TINY = "tiny"


# ---------------------------------------------------------------- advantages


def load_rewards(payload: Any) -> tuple[torch.Tensor, list[float] | None, list[str] | None]:
    """Rewards [B][G][K] (null = missing) from a nested list or {"rewards", "weights"?, "names"?}."""
    body = payload if isinstance(payload, dict) else {"rewards": payload}
    rewards = torch.tensor(
        [[[math.nan if v is None else float(v) for v in rollout] for rollout in group] for group in body["rewards"]],
        dtype=torch.float64,
    )
    if rewards.ndim != 3:
        raise ValueError(f"rewards must be nested [B][G][K], got shape {tuple(rewards.shape)}")
    weights, names = body.get("weights"), body.get("names")
    if isinstance(weights, dict):
        names = names or list(weights)
        weights = [float(weights[n]) for n in names]
    for label, values in (("weights", weights), ("names", names)):
        if values is not None and len(values) != rewards.shape[-1]:
            raise ValueError(f"{len(values)} {label} for K = {rewards.shape[-1]} components")
    return rewards, weights, names


def compute_advantages(payload: Any, estimators: Sequence[str]) -> dict[str, Any]:
    """{"advantages": {estimator: [B][G]}, "diagnostics": {...}} with weights folded in (GDPO: applied to z-scores, as TRL)."""
    rewards, weights, names = load_rewards(payload)
    advantages = {name: ESTIMATORS[name](rewards, weights=weights).tolist() for name in estimators}
    return {"shape": list(rewards.shape), "advantages": advantages, "diagnostics": diagnostics(rewards, weights, names=names)}


def advantages_command(args: argparse.Namespace) -> int:
    payload = json.loads(Path(args.input).read_text() if args.input != "-" else sys.stdin.read())
    estimators = list(ESTIMATORS) if args.estimator == "all" else [args.estimator]
    text = json.dumps(compute_advantages(payload, estimators), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
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


def agentdojo_rows(spec: dict[str, Any], url: str) -> list[dict[str, Any]]:
    """Episodes opened on the service for their first messages; the tool schemas go into the system prompt."""
    client = RewardClient(url)
    tasks = TasksResponse.model_validate(client.request("GET", "/v1/tasks"))
    rows = []
    for suite in spec.get("suites") or list(tasks.suites):
        for user_task in tasks.suites[suite].user_tasks[: spec.get("user_tasks_per_suite", 2)]:
            for injection_task in spec.get("injection_tasks") or [None]:
                episode_spec = EpisodeSpec(
                    suite=suite, user_task=user_task, injection_task=injection_task, attack=spec.get("attack")
                )
                episode = Episode.model_validate(
                    client.request("POST", "/v1/episodes", episode_spec.model_dump(exclude_none=True))
                )
                rows.append({"prompt": with_tools(episode.messages, episode.tools)} | episode_spec.model_dump())
    client.close()
    return rows


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
    domain, spec = config["domain"], config["dataset"]
    if domain == "agentdojo":
        return agentdojo_rows(spec, config["services"]["agentdojo"]["url"])
    return {"code": code_rows, "toolcall": toolcall_rows}[domain](spec)


# ---------------------------------------------------------------- policy and training


def load_policy(model: str, output_dir: str) -> tuple[Any, Any]:
    """(model, tokenizer): "tiny" builds the local tiny policy; anything else goes through from_pretrained (bf16 on GPU)."""
    if model == TINY:
        from .tiny import build_tiny_policy

        return build_tiny_policy(Path(output_dir) / "tiny-policy")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(model, dtype=dtype), tokenizer


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


def train(config: dict[str, Any], rows: list[dict[str, Any]] | None = None, progress: bool = True) -> Any:
    """Build the policy, the reward columns and a CorrGRPOTrainer from `config`, train, and return the trainer.

    `rows` (prompt plus the columns the item builder reads) replace the config's dataset when given.
    """
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback

    from .trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

    trl_args = dict(config.get("trl", {}))
    trl_args.setdefault("output_dir", f"trainer_out/{config['domain']}")
    services, weights = service_rewards(config)
    columns = reward_columns(services)
    model, tokenizer = load_policy(config.get("model", TINY), trl_args["output_dir"])
    if config.get("model", TINY) == TINY:
        # Its matrices are tiny: with more threads, synchronisation dominates (17x slower generation on 2 loaded cores).
        torch.set_num_threads(1)
    args = CorrGRPOConfig(
        advantage_estimator=config.get("estimator", "corrgrpo"),
        advantage_floor=config.get("advantage_floor"),
        reward_weights=weights,
        bf16=torch.cuda.is_available() and config.get("model", TINY) != TINY,
        **trl_args,
    )

    class Progress(TrainerCallback):
        def on_log(self, _args: Any, state: Any, _control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if progress and logs and "reward" in logs:
                parts = "  ".join(f"{c.__name__}={logs.get(f'rewards/{c.__name__}/mean', math.nan):.3f}" for c in columns)
                print(f"[train] step {state.global_step}/{state.max_steps}  reward={logs['reward']:.3f}  {parts}", flush=True)

    trainer = CorrGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=columns,
        args=args,
        train_dataset=Dataset.from_list(rows if rows is not None else load_rows(config)),
        callbacks=[Progress()],
    )
    if progress:
        trainer.remove_callback(PrinterCallback)  # its raw log dicts would drown the progress lines
    trainer.train()
    if progress:
        print(component_table(trainer.state.log_history, [c.__name__ for c in columns]))
    return trainer


def read_config(path: str, overrides: argparse.Namespace) -> dict[str, Any]:
    config = yaml.safe_load(Path(path).read_text())
    if overrides.model:
        config["model"] = overrides.model
    if overrides.max_steps:
        config.setdefault("trl", {})["max_steps"] = overrides.max_steps
    return config


def train_command(args: argparse.Namespace) -> int:
    train(read_config(args.config, args))
    return 0


# ---------------------------------------------------------------- multi-turn agentdojo rollouts


def rollout_command(args: argparse.Namespace) -> int:
    """Run multi-turn episodes with the configured policy and print utility/security per episode."""
    config = read_config(args.config, args)
    model, tokenizer = load_policy(config.get("model", TINY), config.get("trl", {}).get("output_dir", "trainer_out/agentdojo"))
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corrgrpo_trainer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler in (("train", train_command), ("rollout", rollout_command)):
        command = commands.add_parser(name)
        command.add_argument("--config", required=True, help="trainer/configs/<domain>.yaml")
        command.add_argument("--model", help='"tiny" or a from_pretrained name/path (overrides the config)')
        command.add_argument("--max-steps", type=int, help="overrides trl.max_steps")
        command.set_defaults(handler=handler)
    commands.choices["rollout"].add_argument("--episodes", type=int, default=2)
    adv = commands.add_parser("advantages", help="advantages of a [B][G][K] reward JSON")
    adv.add_argument("--input", required=True, help='JSON file ("-" = stdin): [B][G][K] or {"rewards", "weights", "names"}')
    adv.add_argument("--estimator", choices=[*ESTIMATORS, "all"], default="corrgrpo")
    adv.add_argument("--output", help="write the JSON here instead of stdout")
    adv.set_defaults(handler=advantages_command)
    args = parser.parse_args(argv)
    return args.handler(args)
