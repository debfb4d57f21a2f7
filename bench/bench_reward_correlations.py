"""Reward-component correlations on the embedded policy's real rollouts, and what the estimators make of them.

    python bench/bench_reward_correlations.py  # make bench: 4 prompts x 4, 64 tokens, own service
    python bench/bench_reward_correlations.py --prompts 16 --group 8 --max-tokens 192 \\
        --save-rollouts /tmp/r.jsonl
    python bench/bench_reward_correlations.py --rollouts /tmp/r.jsonl --url http://127.0.0.1:18101   # rescore
    python bench/bench_reward_correlations.py --task toolcall --model trainer_out/toolcall_sft \\
        --prompts 8 --group 8

The policy (`--model`, SmolLM2-135M-Instruct by default) samples G completions (temperature 1, fixed seed) for
each of B prompts: HumanEval's (corrgrpo_testing.tasks, the problem inline) or RLLA-4K test rows' (`--task
toolcall`, with their ground truth); or they are read from a `--rollouts` jsonl, so two versions of a service
can score the same rollouts. One request to the task's service at `--url` (default: one started here) scores
them; printed and written as json: each component's mean, the pooled within-group correlation matrix
(components centred on their group mean, then Pearson over all rollouts), the fraction of groups whose
weighted total R or a component is constant, each estimator's mean |A| on the service's declared weights
(`/v1/components`, or `--weights`), and `corrgrpo_trainer.advantages.diagnostics` (GRPO and CorrGRPO scales,
shares of Σρ and Var R).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from corrgrpo_proto import RewardClient

# the test helper: starts a service exactly as its container does
from corrgrpo_testing.servers import start_service
from corrgrpo_testing.tasks import humaneval_problems, humaneval_row, rlla_rows
from corrgrpo_trainer.advantages import ESTIMATORS, diagnostics

RLLA = Path(__file__).resolve().parents[2] / "shared" / "data" / "rlla_4k" / "test.parquet"


def task_rows(task: str) -> list[dict[str, Any]]:
    """Every row of the task, {task_id, prompt, fields}: `fields` is what the service's item needs besides the
    completion (HumanEval: the problem inline; RLLA-4K: the ground truth)."""
    if task == "code":
        rows = map(humaneval_row, humaneval_problems())
        return [
            {"task_id": r["problem"]["task_id"], "prompt": r["prompt"], "fields": {"problem": r["problem"]}}
            for r in rows
        ]
    rows = rlla_rows(str(RLLA), 0, None)
    return [
        {"task_id": f"rlla/{i}", "prompt": r["prompt"], "fields": {"ground_truth": r["ground_truth"]}}
        for i, r in enumerate(rows)
    ]


def generate(
    rows: list[dict[str, Any]],
    model_name: str,
    group: int,
    max_tokens: int,
    seed: int,
    threads: int,
    temperature: float = 1.0,
) -> Iterator[list[dict[str, Any]]]:
    """G sampled completions per prompt ({task_id, prompt} rows), as TRL's GRPOTrainer samples them (no top-k
    / top-p cut), one generate call per prompt: yields its rows {group, task_id, completion}."""
    from corrgrpo_trainer.models import load_pretrained

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model, tokenizer = load_pretrained(model_name, dtype=None)
    for b, row in enumerate(rows):
        started = time.monotonic()
        task_id, chat = row["task_id"], row["prompt"]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **encoded,
                do_sample=True,
                temperature=temperature,
                top_p=1.0,
                top_k=0,
                num_return_sequences=group,
                max_new_tokens=max_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts = tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        print(f"[gen] {task_id}: {group} completions in {time.monotonic() - started:.0f} s", flush=True)
        yield [{"group": b, "task_id": task_id, "completion": text} for text in texts]


@contextlib.contextmanager
def service_url(task: str, url: str | None) -> Iterator[str]:
    """The given URL, or the task's service started for the length of the `with`."""
    if url:
        yield url
        return
    with start_service(task, env={"CORRGRPO_LOG_LEVEL": "WARNING"}, timeout_s=180) as service:
        yield service.url


def score(
    url: str, rollouts: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> tuple[torch.Tensor, list[str], list[float]]:
    """Rewards [B, G, K] (NaN for a failed item), component names and declared weights, from one request."""
    fields = {row["task_id"]: row["fields"] for row in rows}
    with RewardClient(url, retries=2, timeout=900) as client:
        specs = client.components().components
        results = client.score([{"completion": r["completion"], **fields[r["task_id"]]} for r in rollouts])
    names = [spec.name for spec in specs]
    failed = [r.error for r in results if r.error is not None]
    if failed:
        print(
            f"[score] {len(failed)} items failed, e.g. {failed[0].code}: {failed[0].message[:120]}",
            flush=True,
        )
    values = [
        [(r.components or {}).get(n, math.nan) if r.error is None else math.nan for n in names]
        for r in results
    ]
    groups = max(r["group"] for r in rollouts) + 1
    return (
        torch.tensor(values, dtype=torch.float64).view(groups, -1, len(names)),
        names,
        [s.weight for s in specs],
    )


def pooled_correlation(r: torch.Tensor) -> torch.Tensor:
    """[K, K] Pearson correlation of the within-group deviations r_gk − mean_k pooled over groups (NaN: no
    variance)."""
    centred = (r - r.nanmean(dim=1, keepdim=True)).flatten(0, 1)
    centred = centred[~centred.isnan().any(dim=-1)]
    cross = centred.T @ centred
    norm = cross.diagonal().sqrt()
    return cross / torch.outer(norm, norm)  # 0 / 0 = NaN where a component never varies within a group


def measure(r: torch.Tensor, names: list[str], weights: list[float]) -> dict[str, Any]:
    total = (r.nan_to_num(0.0) * torch.tensor(weights, dtype=r.dtype)).sum(dim=-1)
    stats = diagnostics(r, weights, names=names)
    return {
        "groups": r.shape[0],
        "group_size": r.shape[1],
        "weights": dict(zip(names, weights, strict=True)),
        "means": dict(zip(names, r.nanmean(dim=(0, 1)).tolist(), strict=True)),
        "mean_total": total.mean().item(),
        "correlation": {"names": names, "matrix": pooled_correlation(r).tolist()},
        "constant_group_frac": stats["constant_group_frac"],
        "zero_var_frac_per_component": dict(
            zip(names, (r.std(dim=1) == 0).double().mean(dim=0).tolist(), strict=True)
        ),
        "mean_abs_advantage": {
            name: estimator(r, weights).abs().mean().item() for name, estimator in ESTIMATORS.items()
        },
        "diagnostics": stats,
    }


def strict(value: Any) -> Any:
    """The report with NaN (undefined: a component that never varies) as null, so the json is strict."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strict(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def show(report: dict[str, Any]) -> str:
    names = report["correlation"]["names"]
    short = [n[:7] for n in names]
    lines = [
        f"{report['groups']} groups x {report['group_size']} rollouts; weights {report['weights']}",
        "component means: " + ", ".join(f"{n} {v:.3f}" for n, v in report["means"].items()),
        f"mean weighted total R: {report['mean_total']:.3f}",
        "pooled within-group correlation:",
        " " * 9 + "".join(f"{s:>8s}" for s in short),
    ]
    for s, row in zip(short, report["correlation"]["matrix"], strict=True):
        lines.append(f"{s:>9s}" + "".join(f"{v:8.2f}" for v in row))
    d = report["diagnostics"]
    lines += [
        f"groups with constant R: {report['constant_group_frac']:.3f}; (group, component) pairs constant: "
        f"{d['corrgrpo/zero_var_frac']:.3f}",
        "constant per component: "
        + ", ".join(f"{n} {v:.2f}" for n, v in report["zero_var_frac_per_component"].items()),
        "mean |A|: " + ", ".join(f"{n} {v:.3f}" for n, v in report["mean_abs_advantage"].items()),
        f"scale: GRPO 1/std R {d['grpo/scale_mean']:.3f}, CorrGRPO 1/sqrt(sum rho) "
        f"{d['corrgrpo/scale_mean']:.3f}; "
        f"mean off-diagonal rho {d['corrgrpo/offdiag_corr_mean']:.3f}; low sum-rho groups "
        f"{d['corrgrpo/low_sum_rho_frac']:.3f}",
        "CorrGRPO shares of sum rho: " + ", ".join(f"{n} {d[f'corrgrpo/share/{n}']:.3f}" for n in names),
        "GRPO variance shares: " + ", ".join(f"{n} {d[f'grpo/var_share/{n}']:.3f}" for n in names),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--task", choices=["code", "toolcall"], default="code", help="prompts and service (default: code)"
    )
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="policy: embedded default or a checkpoint"
    )
    parser.add_argument("--url", help="the task's service to score with (default: start one here)")
    parser.add_argument(
        "--rollouts", type=Path, help="read rollouts from this jsonl instead of generating them"
    )
    parser.add_argument("--save-rollouts", type=Path, help="write the generated rollouts here (jsonl)")
    parser.add_argument(
        "--prompts", type=int, default=4, help="prompts B, from --start (default: %(default)s)"
    )
    parser.add_argument("--start", type=int, default=0, help="first prompt (default: %(default)s)")
    parser.add_argument(
        "--group", type=int, default=4, help="completions per prompt G (default: %(default)s)"
    )
    parser.add_argument("--max-tokens", type=int, default=64, help="max new tokens (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument(
        "--weights",
        nargs="+",
        default=[],
        metavar="NAME=W",
        help="estimator weights in place of the declared ones, e.g. to compare definitions at equal weights",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path(__file__).parent / "out" / "reward_correlations.json",
        help="report (json)",
    )
    args = parser.parse_args(argv)
    rows = task_rows(args.task)
    if args.rollouts:
        rollouts = [json.loads(line) for line in args.rollouts.read_text().splitlines() if line.strip()]
    else:
        started = time.monotonic()
        rollouts = []
        chosen = rows[args.start : args.start + args.prompts]
        for group in generate(chosen, args.model, args.group, args.max_tokens, args.seed, args.threads):
            rollouts += group
            if args.save_rollouts:  # after every prompt, so a stopped run leaves the groups it finished
                args.save_rollouts.write_text("".join(json.dumps(r) + "\n" for r in rollouts))
        print(f"[gen] {len(rollouts)} completions in {time.monotonic() - started:.0f} s", flush=True)
    with service_url(args.task, args.url) as url:
        started = time.monotonic()
        r, names, weights = score(url, rollouts, rows)
        print(
            f"[score] {r.shape[0] * r.shape[1]} items scored by {url} in {time.monotonic() - started:.0f} s",
            flush=True,
        )
    overrides = {name: float(w) for name, w in (pair.split("=", 1) for pair in args.weights)}
    if unknown := set(overrides) - set(names):
        parser.error(f"--weights: no component {sorted(unknown)} (the service has {names})")
    report = measure(r, names, [overrides.get(name, w) for name, w in zip(names, weights, strict=True)])
    print(show(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(strict(report), indent=1, allow_nan=False))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
