"""How many sandbox runs "each distinct program runs once" saves on real rollouts of the embedded policy.

The training setup of trainer/configs/code.yaml: its LeetCodeDataset prompts, G completions per prompt sampled
as TRL's GRPOTrainer samples them (`bench_reward_correlations.generate`, temperature 1),
`max_completion_length` tokens. Each step's batch (`per_device_train_batch_size` x
`gradient_accumulation_steps` completions, one generation) is one `POST /v1/score`, as the trainer sends it.
Counted from `info.run`: `run` items started a sandbox run; `batch` items reused another item's run of the
same batch; `store` items a stored verdict of an earlier batch. Items whose code does not parse need no run
and count in neither.

Run: `.venv/bin/python bench/bench_code_runs.py [--prompts 16] [--temperature 1.0]` (a few minutes on a CPU);
the dataset is the config's (the hub, or the copies under $CORRGRPO_DATA_DIR, by default ../shared/data when
present).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

import httpx
from bench_reward_correlations import generate

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.config import read_config
from corrgrpo_trainer.data import DATA_DIR_ENV, load_rows

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config", default=str(ROOT / "trainer" / "configs" / "code.yaml"), help="training config"
    )
    parser.add_argument(
        "--prompts", type=int, default=16, help="prompts from the config's dataset (default: %(default)s)"
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (default: TRL's 1.0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = parser.parse_args()
    if (ROOT.parent / "shared" / "data").is_dir():
        os.environ.setdefault(DATA_DIR_ENV, str(ROOT.parent / "shared" / "data"))
    config = read_config(args.config)
    rows = load_rows(config.dataset)[: args.prompts]
    trl = config.trl
    group = trl["num_generations"]
    batch = trl["per_device_train_batch_size"] * trl.get("gradient_accumulation_steps", 1)  # a generation
    problems = {row["problem"]["task_id"]: row["problem"] for row in rows}
    prompts = [{"task_id": row["problem"]["task_id"], "prompt": row["prompt"]} for row in rows]
    sampled = generate(
        prompts,
        config.model,
        group,
        trl["max_completion_length"],
        args.seed,
        args.threads,
        args.temperature,
    )
    items = [
        {"completion": r["completion"], "problem": problems[r["task_id"]]}
        for rollouts in sampled
        for r in rollouts
    ]
    counts: collections.Counter[str] = collections.Counter()
    with start_service("code", env={"CORRGRPO_CODE_DATASETS": ""}) as service:
        for start in range(0, len(items), batch):
            response = httpx.post(
                f"{service.url}/v1/score", json={"items": items[start : start + batch]}, timeout=600
            )
            response.raise_for_status()
            for result in response.json()["results"]:
                parsed = result["info"]["stage"] != "syntax"
                counts["parsed" if parsed else "unparsed"] += 1
                if parsed:
                    counts[result["info"]["run"]] += 1
    distinct = len({(item["problem"]["task_id"], item["completion"]) for item in items})
    saved = counts["batch"] + counts["store"]
    summary = {
        "items": len(items),
        "identical completions": len(items) - distinct,
        **counts,
        "runs saved": saved,
    }
    print(
        f"code.yaml rollouts: {len(rows)} prompts x G={group}, batches of {batch}, temperature "
        f"{args.temperature}\n"
    )
    print(
        "| items | parse | sandbox runs | shared in batch | from store | runs saved | identical completions |"
    )
    print("|---|---|---|---|---|---|---|")
    share = saved / counts["parsed"] if counts["parsed"] else 0.0
    print(
        f"| {len(items)} | {counts['parsed']} | {counts['run']} | {counts['batch']} | {counts['store']} "
        f"| {saved} ({share:.0%} of parsed) | {len(items) - distinct} |"
    )
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
