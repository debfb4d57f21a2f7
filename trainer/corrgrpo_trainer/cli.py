"""`python -m corrgrpo_trainer <command>`: the trainer's command line; each command is a few lines over its module.

train       --config trainer/configs/<domain>.yaml [--model M] [--max-steps N] [--output-dir D]    train.py
sft         --config trainer/configs/<domain>_sft.yaml [--model M] [--max-steps N] [--output-dir D]  sft.py, the warm-up
eval        --config trainer/configs/agentdojo.yaml [--model M] [--output F]   AgentDojo's paper metrics (agentdojo/)
rollout     --config trainer/configs/agentdojo.yaml [--model M] [--episodes N]   a look at a few AgentDojo episodes
advantages  --input rewards.json [--estimator corrgrpo|grpo|gdpo|all] [--output out.json]   for other stacks
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .advantages import ESTIMATORS
from .agentdojo.evaluate import evaluate, rollout
from .config import InputError, ServicesDown, check_services, read_config
from .models import EMBEDDED, TINY, PolicyLoadError
from .reward_json import compute_advantages, read_json, strict_json
from .sft import sft
from .train import train

COMMANDS = {
    "train": "train a policy with CorrGRPO/GRPO/GDPO against running reward services (TRL)",
    "sft": "supervised warm-up on tool-call demonstrations before RL (TRL's SFTTrainer), writing a checkpoint",
    "eval": "AgentDojo's paper metrics: utility without and under attack, attack success rate (multi-turn, TRL's loop)",
    "rollout": "run multi-turn AgentDojo episodes with a policy and print utility/security",
    "advantages": "advantages and diagnostics of a [B][G][K] reward JSON, for other stacks (torch only)",
}


def train_command(args: argparse.Namespace) -> int:
    train(read_config(args.config, args))
    return 0


def sft_command(args: argparse.Namespace) -> int:
    sft(read_config(args.config, args, required=("domain", "dataset")))
    return 0


def eval_command(args: argparse.Namespace) -> int:
    config = read_config(args.config, args)
    check_services(config)  # before the policy loads
    evaluate(config, args.output)
    return 0


def rollout_command(args: argparse.Namespace) -> int:
    config = read_config(args.config, args)
    check_services(config)  # before the policy loads
    rollout(config, args.episodes)
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_trainer",
        description="The corrgrpo trainer: train against the reward services, evaluate AgentDojo episodes, "
        "compute advantages for other stacks.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    handlers = {"train": train_command, "sft": sft_command, "eval": eval_command, "rollout": rollout_command}
    for name, handler in handlers.items():
        command = commands.add_parser(name, help=COMMANDS[name], description=COMMANDS[name])
        command.add_argument("--config", required=True, help="YAML config, e.g. trainer/configs/<domain>.yaml (required)")
        command.add_argument(
            "--model",
            help=f"{EMBEDDED!r} (embedded SmolLM2-135M-Instruct), {TINY!r} (random, for tests), a local checkpoint "
            "directory or a hub id (default: the config's `model`)",
        )
        command.set_defaults(handler=handler)
    for train_parser in (commands.choices["train"], commands.choices["sft"]):
        train_parser.add_argument("--max-steps", type=int, help="training steps (default: the config's trl.max_steps)")
        train_parser.add_argument(
            "--output-dir", help="where checkpoints and metrics.jsonl go (default: the config's trl.output_dir)"
        )
    commands.choices["eval"].add_argument(
        "--output", default="trainer_out/agentdojo-eval/metrics.json", help="metrics JSON written here (default: %(default)s)"
    )
    commands.choices["rollout"].add_argument(
        "--episodes", type=int, default=2, help="the config's first N episodes (default: %(default)s)"
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
