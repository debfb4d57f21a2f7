"""How many sandbox runs "each distinct program runs once" saves on real rollouts of the embedded policy.

The training setup of trainer/configs/code.yaml: its LeetCodeDataset prompts, G completions per prompt sampled as
TRL's GRPOTrainer samples them (temperature 1, no top-k / top-p cut), `max_completion_length` tokens. Each step's
batch (`per_device_train_batch_size` completions) is one `POST /v1/score`, as the trainer sends it. Counted from
`info.run`: `run` items started a sandbox run; `batch` items reused another item's run of the same batch; `store`
items a stored verdict of an earlier batch. Items whose code does not parse need no run and count in neither.

Run: `.venv/bin/python bench/bench_code_runs.py [--prompts 16] [--temperature 1.0]` (a few minutes on a CPU).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.data import load_rows
from corrgrpo_trainer.models import load_pretrained

ROOT = Path(__file__).resolve().parents[1]


def sample(model: Any, tokenizer: Any, prompt: list[dict], count: int, max_new_tokens: int, temperature: float) -> list[str]:
    """`count` completions of one chat prompt, sampled as GRPOTrainer does."""
    import torch

    text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **encoded,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            num_return_sequences=count,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    return tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "trainer" / "configs" / "code.yaml"), help="training config")
    parser.add_argument("--prompts", type=int, default=16, help="prompts from the config's dataset (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: TRL's 1.0)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    torch.manual_seed(args.seed)
    config = yaml.safe_load(Path(args.config).read_text())
    os.chdir(ROOT)  # the config's dataset path is relative to the repository
    rows = load_rows(config)[: args.prompts]
    trl = config["trl"]
    group, batch = trl["num_generations"], trl["per_device_train_batch_size"]
    model, tokenizer = load_pretrained(config["model"], dtype=None)
    items = []
    for index, row in enumerate(rows):
        for completion in sample(model, tokenizer, row["prompt"], group, trl["max_completion_length"], args.temperature):
            items.append({"completion": completion, "problem": row["problem"]})
        print(f"[bench] sampled {index + 1}/{len(rows)} prompts", file=sys.stderr, flush=True)
    counts: collections.Counter[str] = collections.Counter()
    with start_service("code", env={"CORRGRPO_CODE_DATASETS": ""}) as service:
        for start in range(0, len(items), batch):
            response = httpx.post(f"{service.url}/v1/score", json={"items": items[start : start + batch]}, timeout=600)
            response.raise_for_status()
            for result in response.json()["results"]:
                info = result["info"]
                counts["parsed" if info["stage"] != "syntax" else "unparsed"] += 1
                if info["stage"] != "syntax":
                    counts[info["run"]] += 1
    distinct = len({(item["problem"]["task_id"], item["completion"]) for item in items})
    saved = counts["batch"] + counts["store"]
    summary = {"items": len(items), "identical completions": len(items) - distinct, **counts, "runs saved": saved}
    print(f"code.yaml rollouts: {len(rows)} prompts x G={group}, batches of {batch}, temperature {args.temperature}\n")
    print("| items | parse | sandbox runs | shared in batch | from store | runs saved | identical completions |")
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
