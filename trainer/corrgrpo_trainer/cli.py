"""`python -m corrgrpo_trainer <command>`: the trainer's command line. Each command is a few lines over its
module.

Every command that reads a config takes `--config FILE`, `--set key.path=value` (repeatable) and `--model M`;
COMMANDS lists them, with the function that adds a command's own options.

run         --config trainer/configs/toolcall.yaml [--warmup-set K=V]   warm-up (when missing), RL, evaluation
pipeline.py preflight   --config trainer/configs/<domain>.yaml   one batch: truncation, zero variance, step
time, advice  preflight.py train       --config trainer/configs/<domain>.yaml [--max-steps N] [--output-dir D]
RL only            train.py sft         --config trainer/configs/<domain>_sft.yaml [--max-steps N]
[--output-dir D]  the warm-up only  sft.py eval        --config trainer/configs/agentdojo.yaml [--output F]
AgentDojo's paper metrics (agentdojo/) rollout     --config trainer/configs/agentdojo.yaml [--episodes N]   a
look at a few AgentDojo episodes advantages  --input rewards.json [--estimator corrgrpo|grpo|gdpo|all]
[--output out.json]   for other stacks schema      [--output-dir D]   the configs' JSON Schemas
(trainer/schemas/) report      RUN_DIR [RUN_DIR ...] [--output-dir D]   the kept rollouts as PNGs, several
runs overlaid        report.py rescore     RUN_DIR [--url NAME=URL]   the kept rollouts scored again: which
values changed              rescore.py
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .advantages import ESTIMATORS
from .config import InputError, ServicesDown, read_config
from .config_shape import DEFAULT_ESTIMATOR, SCHEMA_DIR, Config, Kind, RLConfig, WarmupConfig, write_schemas
from .models import EMBEDDED, TINY, TINY_CONTEXT, PolicyLoadError
from .reward_json import advantages_report, read_json, strict_json
from .rewards import check_services
from .rundir import Interrupted, claim


@dataclass(frozen=True)
class Command:
    help: str
    handler: Callable[[argparse.Namespace], int]
    options: Callable[[argparse.ArgumentParser], None] = lambda parser: None


def config_of(args: argparse.Namespace, kind: Kind = "rl") -> Config:
    """The command's config: the file with `--set` and the shorthand options applied, checked."""
    overrides = [f"model={json.dumps(args.model)}"] if args.model else []
    if getattr(args, "max_steps", None):
        overrides.append(f"trl.max_steps={args.max_steps}")
    if getattr(args, "output_dir", None):
        overrides.append(f"trl.output_dir={json.dumps(args.output_dir)}")
    return read_config(args.config, kind, [*args.set, *overrides])


def rl_config_of(args: argparse.Namespace) -> RLConfig:
    return typing.cast(RLConfig, config_of(args))


def run_command(args: argparse.Namespace) -> int:
    from .pipeline import run

    config = rl_config_of(args)
    claim(config.run_path, config.output_dir, args.resume)
    run(config, warmup_of(config, args.warmup_set), args.resume)
    return 0


def warmup_of(config: RLConfig, warmup_set: list[str]) -> WarmupConfig | None:
    """The config's warm-up (an SFT config) for the RL config's model, or None."""
    if config.warmup is None:
        return None
    tiny = [f"trl.max_length={TINY_CONTEXT}"] if config.model == TINY else []  # its rows are longer in tokens
    overrides = [*tiny, *warmup_set, f"model={json.dumps(config.model)}"]
    return typing.cast(WarmupConfig, read_config(config.warmup, "warmup", overrides))


def preflight_command(args: argparse.Namespace) -> int:
    from .pipeline import warmup_checkpoint
    from .preflight import preflight, starting_model

    warmup = warmup_of(config := rl_config_of(args), args.warmup_set)
    start, note = starting_model(config, warmup_checkpoint(config, warmup) if warmup else None)
    preflight(start, warmup, note)
    return 0


def train_command(args: argparse.Namespace) -> int:
    from .pipeline import write_resolved
    from .preflight import record_peak_memory
    from .train import train

    config = rl_config_of(args)
    claim(config.run_path, config.output_dir, args.resume)
    write_resolved(config, config.run_path)
    train(config, resume=args.resume)
    record_peak_memory(config.run_path)
    return 0


def sft_command(args: argparse.Namespace) -> int:
    from .sft import sft

    sft(typing.cast(WarmupConfig, config_of(args, "warmup")))
    return 0


def eval_command(args: argparse.Namespace) -> int:
    from .agentdojo.episode_metrics import evaluate

    config = rl_config_of(args)
    check_services(config.services)  # before the policy loads
    evaluate(config, args.output)
    return 0


def rollout_command(args: argparse.Namespace) -> int:
    from .agentdojo.episode_metrics import rollout

    config = rl_config_of(args)
    check_services(config.services)  # before the policy loads
    rollout(config, args.episodes)
    return 0


def advantages_command(args: argparse.Namespace) -> int:
    payload = read_json(args.input)
    estimators = list(ESTIMATORS) if args.estimator == "all" else [args.estimator]
    text = json.dumps(strict_json(advantages_report(payload, estimators)), indent=2, allow_nan=False)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n")
        except OSError as error:
            raise InputError(f"cannot write {args.output}: {error.strerror or error}") from None
    else:
        print(text)
    return 0


def schema_command(args: argparse.Namespace) -> int:
    for path in write_schemas(Path(args.output_dir)):
        print(path)
    return 0


def config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, help="YAML config, e.g. trainer/configs/<domain>.yaml (required)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a config key, the value read as YAML, e.g. --set estimator=grpo --set "
        "trl.max_steps=2; "
        "repeatable (default: none)",
    )
    parser.add_argument(
        "--model",
        help=f"{EMBEDDED!r} (embedded SmolLM2-135M-Instruct), {TINY!r} (random, for tests), a local "
        f"checkpoint "
        "directory or a hub id (default: the config's `model`)",
    )


def training_options(parser: argparse.ArgumentParser) -> None:
    config_options(parser)
    parser.add_argument("--max-steps", type=int, help="training steps (default: the config's trl.max_steps)")
    parser.add_argument(
        "--output-dir",
        help="where checkpoints and metrics.jsonl go (default: the config's trl.output_dir, under the "
        "working folder)",
    )


def rl_options(parser: argparse.ArgumentParser) -> None:
    training_options(parser)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the output directory from its last checkpoint (default: a non-empty one "
        "is refused)",
    )


def run_options(parser: argparse.ArgumentParser) -> None:
    rl_options(parser)
    warmup_set_option(parser)


def warmup_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warmup-set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a key of the warm-up config, as --set does for the RL config; repeatable (default: "
        "none)",
    )


def preflight_options(parser: argparse.ArgumentParser) -> None:
    config_options(parser)
    warmup_set_option(parser)


def eval_options(parser: argparse.ArgumentParser) -> None:
    config_options(parser)
    parser.add_argument(
        "--output",
        default="trainer_out/agentdojo-eval/metrics.json",
        help="metrics JSON written here (default: %(default)s)",
    )


def rollout_options(parser: argparse.ArgumentParser) -> None:
    config_options(parser)
    parser.add_argument(
        "--episodes", type=int, default=2, help="the config's first N episodes (default: %(default)s)"
    )


def advantages_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        help='JSON file ("-" = stdin): [B][G][K] or {"rewards", "weights", "names"} (required)',
    )
    parser.add_argument(
        "--estimator",
        choices=[*ESTIMATORS, "all"],
        default=DEFAULT_ESTIMATOR,
        help="which advantages (default: %(default)s)",
    )
    parser.add_argument(
        "--output", help="write the JSON to this file (default: stdout); undefined numbers are null"
    )


def report_command(args: argparse.Namespace) -> int:
    from .report import report

    for path in report(args.run_dirs, args.output_dir):
        print(path)
    return 0


def rescore_command(args: argparse.Namespace) -> int:
    from .rescore import rescore, summary_table

    urls = dict(move.partition("=")[::2] for move in args.url)
    summary = rescore(args.run_dir, urls, args.token_file)
    print(summary_table(summary))
    return 1 if any(summary["changed"].values()) else 0


def run_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory of train or run (the config's run_dir)"
    )


def report_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories of train or run; several are overlaid"
    )
    parser.add_argument(
        "--output-dir", help="write the PNGs here (default: RUN_DIR; for several runs ./report)"
    )


def rescore_options(parser: argparse.ArgumentParser) -> None:
    run_dir_option(parser)
    parser.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="score service NAME at URL instead; repeatable (default: the urls of the run's "
        "config.resolved.yaml)",
    )
    parser.add_argument(
        "--token-file",
        help="the bearer token for the --url services (default: none; the run's token goes to the run's "
        "urls only)",
    )


def schema_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-dir", default=str(SCHEMA_DIR), help="write the schemas here (default: %(default)s)"
    )


COMMANDS = {
    "run": Command(
        "warm-up (when its checkpoint is missing), RL and the held-out evaluation into one run directory",
        run_command,
        run_options,
    ),
    "preflight": Command(
        "one batch of the configured policy scored by the services: truncation, zero variance, reward "
        "ranges, "
        "a step's time, advice",
        preflight_command,
        preflight_options,
    ),
    "train": Command(
        "train a policy with CorrGRPO/GRPO/GDPO against running reward services (TRL)",
        train_command,
        rl_options,
    ),
    "sft": Command(
        "supervised warm-up on tool-call demonstrations before RL (TRL's SFTTrainer), writing a checkpoint",
        sft_command,
        training_options,
    ),
    "eval": Command(
        "AgentDojo's paper metrics: utility without and under attack, attack success rate (multi-turn, "
        "TRL's loop)",
        eval_command,
        eval_options,
    ),
    "rollout": Command(
        "run multi-turn AgentDojo episodes with a policy and print utility/security",
        rollout_command,
        rollout_options,
    ),
    "advantages": Command(
        "advantages and diagnostics of a [B][G][K] reward JSON, for other stacks (torch only)",
        advantages_command,
        advantages_options,
    ),
    "schema": Command("write the JSON Schemas of the RL and warm-up configs", schema_command, schema_options),
    "report": Command(
        "PNGs of a run's kept rollouts (several runs overlaid): rewards, CorrGRPO's scale, correlations, "
        "zero variance, "
        "held-out evaluation",
        report_command,
        report_options,
    ),
    "rescore": Command(
        "send a run's kept rollouts to the services again; per component, how many values changed (exit 1 "
        "if any)",
        rescore_command,
        rescore_options,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_trainer",
        description="The corrgrpo trainer: train against the reward services, evaluate AgentDojo episodes, "
        "compute advantages for other stacks.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.help)
        command.options(sub)
        sub.set_defaults(handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    again = shlex.join([*parser.prog.split(), *argv])
    resume = again if "--resume" in argv else f"{again} --resume"
    try:
        return args.handler(args)
    except (InputError, PolicyLoadError, ServicesDown) as error:
        parser.exit(2, f"{parser.prog} {args.command}: error: {error}\n")
    except Interrupted as error:
        parser.exit(130, f"{parser.prog} {args.command}: {error}; resume: {resume}\n")
    except KeyboardInterrupt:  # a second Ctrl-C in training, or one in another phase
        if hasattr(args, "resume"):
            parser.exit(
                130,
                f"\n{parser.prog} {args.command}: interrupted; resume from the last checkpoint: {resume}\n",
            )
        parser.exit(130, f"\n{parser.prog} {args.command}: interrupted; run it again: {again}\n")
