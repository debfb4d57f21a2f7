"""Multi-turn AgentDojo training throughput: episodes per second through TRL's loop.

Also the service's share of a step, and whether TRL runs the tool calls of different rollouts concurrently.

Runs `train` (CorrGRPO, TRL environment_factory) against a real AgentDojo service process for
`--steps` steps on banking/user_task_0 under injection_task_0. Default policy: the tiny one steered
by `sequence_bias` to call `read_file` once and answer (the fast test's policy), so every rollout makes
a tool call; `--model smollm2-135m-instruct` runs the real pretrained policy unsteered.

    python bench/bench_agentdojo_train.py [--steps 3] [--rollouts 8] [--model ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from corrgrpo_testing.servers import start_service  # starts a service as its container does
from corrgrpo_testing.steered import agentdojo_config, steered_policy  # the fast test's steered policy
from corrgrpo_trainer.config import parse_config
from corrgrpo_trainer.train import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per step (one prompt group)")
    parser.add_argument("--model", default="steered-tiny")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with (
        tempfile.TemporaryDirectory() as scratch,
        start_service("agentdojo", env={"CORRGRPO_LOG_LEVEL": "WARNING"}) as service,
    ):
        trl = {
            "max_tool_calling_iterations": 2,
            "per_device_train_batch_size": args.rollouts,
            "num_generations": args.rollouts,
        }
        if args.model == "steered-tiny":
            model, bias = steered_policy(Path(scratch))
            trl["generation_kwargs"] = {"sequence_bias": bias}
        else:
            model = args.model
            trl["max_completion_length"] = 64
        config = agentdojo_config(service, Path(scratch) / "out", model, **trl)
        config["trl"]["max_steps"] = args.steps
        trainer = train(parse_config(config), progress=False)
    clock = next(iter(trainer.environment_factories.values())).clock
    runtime = trainer.state.log_history[-1]["train_runtime"]
    episodes = args.steps * args.rollouts
    service_s = sum(clock.seconds(kind) for kind in clock.spans)
    calls = [log.get("tools/call_frequency", 0.0) for log in trainer.state.log_history if "reward" in log]
    print(
        f"policy {args.model}, {args.steps} steps x {args.rollouts} rollouts, banking/user_task_0 + "
        f"injection_task_0"
    )
    print("| measure | value |\n|---|---|")
    print(f"| step time (train_runtime / steps) | {runtime / args.steps:.2f} s |")
    print(f"| episodes per second through the loop | {episodes / runtime:.2f} |")
    print(f"| tool calls per rollout (tools/call_frequency) | {sum(calls) / len(calls):.2f} |")
    for kind, spans in clock.spans.items():
        seconds, overlap = clock.seconds(kind), clock.max_overlap(kind)
        print(f"| service {kind}: calls, total s, max in flight | {len(spans)}, {seconds:.2f}, {overlap} |")
    print(
        f"| service share of the run (all service calls / train_runtime) | {100 * service_s / runtime:.1f}% |"
    )
    print(
        f"| tool calls run one after another: their time, the most concurrency could save | "
        f"{clock.seconds('step'):.2f} s ({100 * clock.seconds('step') / runtime:.1f}% of the run) |"
    )


if __name__ == "__main__":
    main()
