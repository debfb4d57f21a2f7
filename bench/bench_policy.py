"""GRPO vs CorrGRPO vs GDPO on a real pretrained policy (SmolLM2-135M-Instruct), same seeds and prompts.

    python bench/bench_policy.py --out /tmp/policy                 # the CPU size (see --help for every knob)
    python bench/bench_policy.py --out /tmp/policy --steps 200 --seeds 0 1 2 --train-prompts 128 \\
        --eval-prompts 64 --model Qwen/Qwen2.5-Coder-0.5B-Instruct   # the same on a GPU
    python bench/bench_policy.py --out /tmp/policy --report-only --docs docs  # table + plot of what finished

Per task (code: HumanEval; toolcall: RLLA-4K), the base policy is evaluated once on held-out prompts, then for
every seed × estimator a fresh copy trains `--steps` steps against the live services
(`corrgrpo_trainer.train.train`, which writes metrics.jsonl) and is evaluated again on the same prompts with
greedy decoding. Metrics are the services' own evaluators: code `python -m
corrgrpo_devtools.execution_metrics` (Executable, Pass@1, Efficiency; run as a subprocess because it pins
itself to one core), toolcall `corrgrpo_devtools.match_metrics` (format, name, parameter name / value,
all-exact, %). Each run's results are written as soon as it ends, so `--report-only` can tabulate a partial
run.

One file of ~340 lines on purpose: a bench script is run by path (`bench/` is no package) and read top-down,
from the rows to the table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from corrgrpo_testing.servers import launch
from corrgrpo_testing.tasks import HUMANEVAL, humaneval_rows, rlla_rows

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ESTIMATORS = ("grpo", "corrgrpo", "gdpo")
CODE_COMPONENTS = ("format", "syntax", "compile", "runtime", "correct", "ast_similarity", "efficiency")
TOOL_COMPONENTS = ("format", "name", "param_names", "param_values")


def task_rows(task: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held-out) rows; held-out first so the toolcall evaluator's "first rows" are the held-out
    ones."""
    ev, tr = args.eval_prompts, args.train_prompts
    if task == "code":
        return humaneval_rows(ev, ev + tr), humaneval_rows(0, ev)
    rows = rlla_rows(str(args.rlla), 0, ev + tr)
    return rows[ev:], rows[:ev]


def generate(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], max_new_tokens: int, batch: int = 8
) -> list[str]:
    """Greedy completions of each row's chat prompt."""
    import torch

    tokenizer.padding_side = "left"
    texts = []
    for start in range(0, len(rows), batch):
        prompts = [
            tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            for row in rows[start : start + batch]
        ]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        with torch.no_grad():
            out = model.generate(
                **encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        texts += tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def evaluate(
    task: str, rows: list[dict[str, Any]], completions: list[str], where: Path, args: argparse.Namespace
) -> dict:
    """The paper's metrics of the completions (percentages)."""
    if task == "code":
        path = where / "eval_completions.jsonl"
        path.write_text(
            "".join(
                json.dumps({"task_id": r["problem"]["task_id"], "completion": c}) + "\n"
                for r, c in zip(rows, completions, strict=True)
            )
        )
        command = [
            sys.executable,
            "-m",
            "corrgrpo_devtools.execution_metrics",
            "--completions",
            str(path),
            "--rounds",
            str(args.rounds),
        ]
        result = subprocess.run(
            [*command, "--workers", "1", "--json"], capture_output=True, text=True, check=True
        )
        return json.loads(result.stdout.strip().splitlines()[-1])
    from corrgrpo_devtools.match_metrics import evaluate as evaluate_toolcall
    from corrgrpo_toolcall.datasets import load

    (where / "eval_completions.jsonl").write_text(
        "".join(json.dumps({"completion": c}) + "\n" for c in completions)
    )
    report = evaluate_toolcall("rlla4k", load("rlla4k", str(args.rlla))[: len(completions)], completions)
    return {k: v for k, v in vars(report).items() if k != "dataset"}


def config_for(
    task: str, url: str, estimator: str, seed: int, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    return {
        "domain": task,
        "model": args.policy_dir,
        "torch_threads": args.threads,
        "dataset": {"path": str(args.rlla) if task == "toolcall" else HUMANEVAL},  # rows go to train()
        "services": {task: {"url": url, "client": {"retries": 4, "timeout": 300}}},
        "estimator": estimator,
        "trl": {
            "output_dir": str(out),
            "seed": seed,
            "max_steps": args.steps,
            "per_device_train_batch_size": args.batch // args.grad_accum,
            "gradient_accumulation_steps": args.grad_accum,
            "num_generations": args.num_generations,
            "max_completion_length": args.max_tokens,
            "learning_rate": args.learning_rate,
            "temperature": 1.0,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
            "gradient_checkpointing": False,
            "use_cpu": args.cpu,
        },
    }


def run_task(task: str, args: argparse.Namespace) -> None:
    import torch

    from corrgrpo_trainer.config import parse_config
    from corrgrpo_trainer.models import load_pretrained
    from corrgrpo_trainer.train import train

    train_rows, eval_rows = task_rows(task, args)
    base = args.out / task
    base.mkdir(parents=True, exist_ok=True)
    with (base / "commands.txt").open("a") as handle:
        handle.write(" ".join(["python", *sys.argv]) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "CORRGRPO_REDIS_URL"}  # in-memory store
    service = launch(task, env, log_path=str(base / "service.log"))
    try:
        service.wait_healthy(180)
        print(
            f"[bench] {task}: service up at {service.url}; {len(train_rows)} train / {len(eval_rows)} "
            f"held-out prompts",
            flush=True,
        )
        before = base / "before"
        if not (before / "eval.json").is_file():
            before.mkdir(exist_ok=True)
            started = time.monotonic()
            model, tokenizer = load_pretrained(args.policy_dir, dtype=None)
            metrics = evaluate(
                task, eval_rows, generate(model, tokenizer, eval_rows, args.max_tokens), before, args
            )
            (before / "eval.json").write_text(json.dumps(metrics))
            print(f"[bench] {task} before: {metrics} ({time.monotonic() - started:.0f} s)", flush=True)
        for seed in args.seeds:
            for estimator in args.estimators:
                out = base / f"{estimator}-s{seed}"
                if (out / "eval.json").is_file():
                    continue
                started = time.monotonic()
                print(f"[bench] {task} {estimator} seed {seed}: {args.steps} steps", flush=True)
                torch.manual_seed(seed)
                config = parse_config(config_for(task, service.url, estimator, seed, out, args))
                trainer = train(config, rows=train_rows)
                trained = time.monotonic() - started
                completions = generate(trainer.model, trainer.processing_class, eval_rows, args.max_tokens)
                metrics = evaluate(task, eval_rows, completions, out, args) | {"train_s": trained}
                (out / "eval.json").write_text(json.dumps(metrics))
                print(
                    f"[bench] {task} {estimator} seed {seed} after: {metrics} "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
                del trainer
    finally:
        service.stop()


# ---------------------------------------------------------------- report


def read_runs(out: Path, task: str) -> dict[str, Any]:
    runs = {}
    order = {estimator: i for i, estimator in enumerate(ESTIMATORS)}
    for run in sorted((out / task).glob("*-s*"), key=lambda p: (order.get(p.name.split("-s")[0], 9), p.name)):
        if (run / "eval.json").is_file():
            history = [
                json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()
            ]
            runs[run.name] = {"eval": json.loads((run / "eval.json").read_text()), "history": history}
    return runs


CODE_COLUMNS = [("executable", "Executable %"), ("pass@1", "Pass@1 %"), ("efficiency", "Efficiency %")]
TOOL_COLUMNS = [
    ("format", "format %"),
    ("name", "name"),
    ("param_names", "param name"),
    ("param_values", "param value"),
    ("all_exact", "all-exact %"),
]


def table(out: Path, task: str) -> str:
    columns = CODE_COLUMNS if task == "code" else TOOL_COLUMNS
    before = out / task / "before" / "eval.json"
    rows = [("base policy", json.loads(before.read_text()), None)] if before.is_file() else []
    for name, run in read_runs(out, task).items():
        rows.append((name, run["eval"], run["history"]))
    lines = [
        "| run | "
        + " | ".join(label for _, label in columns)
        + " | reward first → last | zero-std groups | train s |"
    ]
    lines.append("|---" * (len(columns) + 4) + "|")
    for name, metrics, history in rows:
        cells = [f"{metrics.get(key, float('nan')):.1f}" for key, _ in columns]
        if history:
            rewards = [h["reward"] for h in history]
            zero = sum(h.get("frac_reward_zero_std", 0) for h in history) / len(history)
            extra = [
                f"{rewards[0]:.2f} → {rewards[-1]:.2f}",
                f"{zero:.2f}",
                f"{metrics.get('train_s', 0):.0f}",
            ]
        else:
            extra = ["", "", ""]
        lines.append(f"| {name} | " + " | ".join(cells + extra) + " |")
    return "\n".join(lines)


def plot(out: Path, tasks: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trained = [task for task in tasks if read_runs(out, task)]
    panels = [(task, c) for task in trained for c in (CODE_COMPONENTS if task == "code" else TOOL_COMPONENTS)]
    cols = 4
    fig, axes = plt.subplots(
        (len(panels) + cols - 1) // cols,
        cols,
        figsize=(4 * cols, 3 * ((len(panels) + cols - 1) // cols)),
        squeeze=False,
    )
    colors = dict(zip(ESTIMATORS, ("tab:blue", "tab:red", "tab:green"), strict=True))
    for axis, (task, component) in zip(axes.flat, panels, strict=False):
        for name, run in read_runs(out, task).items():
            estimator = name.split("-s")[0]
            steps = [h["step"] for h in run["history"]]
            axis.plot(
                steps,
                [h.get(f"rewards/{component}/mean") for h in run["history"]],
                color=colors.get(estimator),
                alpha=0.8,
                label=name,
            )
        axis.set_title(f"{task}: {component}", fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower right", fontsize=8)
    fig.suptitle(
        "mean training reward per component (batch mean per step; same seeds and prompts)", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(args: argparse.Namespace) -> None:
    tasks = [t for t in args.tasks if (args.out / t).is_dir()]
    text = [f"# Policy experiment: {args.model}", ""]
    for task in tasks:
        commands = (
            (args.out / task / "commands.txt").read_text().split("\n")
            if (args.out / task / "commands.txt").is_file()
            else []
        )
        # wrapped inside the code span (read as one line) to the docs' 120-character width, the "  " break
        # included
        wrapped = (
            textwrap.fill(f"`{c}`", 118, break_long_words=False, break_on_hyphens=False)
            for c in commands
            if c
        )
        text += [f"## {task}", "", *(f"{c}  " for c in wrapped), "", table(args.out, task), ""]
    target = args.docs or args.out
    target.mkdir(parents=True, exist_ok=True)
    (target / "policy_experiment.md").write_text("\n".join(text))
    plot(args.out, tasks, target / "policy_experiment.png")
    print("\n".join(text))
    print(f"[bench] wrote {target / 'policy_experiment.md'} and {target / 'policy_experiment.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="results folder (runs already there are skipped; required)"
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["code", "toolcall"],
        choices=["code", "toolcall"],
        help="tasks to run (default: %(default)s)",
    )
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=list(ESTIMATORS),
        choices=ESTIMATORS,
        help="estimators to compare (default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=[0],
        help="seeds (the same for every estimator) (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="policy: embedded default, local path or hub id (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=8, help="training steps per run (default: %(default)s)")
    parser.add_argument(
        "--train-prompts", type=int, default=16, help="training prompts per task (default: %(default)s)"
    )
    parser.add_argument(
        "--eval-prompts",
        type=int,
        default=16,
        help="held-out prompts per task (greedy, before and after) (default: %(default)s)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=8,
        help="completions per step (2 prompts x G = 4 by default) (default: %(default)s)",
    )
    parser.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        help="micro-batches per step: --batch / N completions per forward pass, the memory to match "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--num-generations",
        type=int,
        default=4,
        help="completions per prompt (group size G) (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        help="max completion tokens (training and evaluation) (default: %(default)s)",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=2e-5, help="AdamW learning rate (default: %(default)s)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads on CPU (1 is fastest on loaded cores) (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="paired timing rounds of the Efficiency metric (default: %(default)s)",
    )
    parser.add_argument(
        "--rlla",
        type=Path,
        default=DATA / "rlla_4k" / "test.parquet",
        help="RLLA-4K parquet (default: %(default)s)",
    )
    parser.add_argument("--report-only", action="store_true", help="only tabulate and plot what --out holds")
    parser.add_argument(
        "--docs", type=Path, default=None, help="write the table and plot here (default: --out)"
    )
    args = parser.parse_args(argv)
    if args.batch % args.grad_accum:
        parser.error("--batch must be a multiple of --grad-accum")
    import torch

    from corrgrpo_trainer.models import TINY, resolve_model
    from corrgrpo_trainer.tiny import build_tiny_policy

    args.cpu = not torch.cuda.is_available()
    if args.cpu:
        torch.set_num_threads(args.threads)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the services
    if not args.report_only:
        args.policy_dir = resolve_model(args.model) if args.model != TINY else str(args.out / "tiny-policy")
        if args.model == TINY:  # a smoke test of this script in seconds
            build_tiny_policy(args.policy_dir)
        for task in args.tasks:
            run_task(task, args)
    report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
