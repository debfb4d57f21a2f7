"""`python -m corrgrpo_trainer sft`: the supervised warm-up before RL, on demonstrations RL would reward.

By itself the 135M policy never writes a well-formed tool call, so every RL group is constant and nothing is
learned (docs/policy_experiment.md). A short SFT (TRL's `SFTTrainer`) on demonstrations fixes that:

- `toolcall`: ToolRL's warm-up set (`rlla_sft.json`, {instruction, input, output}) as the chat the RLLA-4K RL
  rows give the policy: prompt [system instruction, user input], completion [assistant output], loss on the
  completion. Rows whose user turn is an evaluation row's (`exclude_prompts_of`) are left out;
  `think_sentences` keeps the first sentences of each `<think>` (ToolRL's run to ~300 tokens, RL's completions
  get 64-128).
- `agentdojo`: the training user tasks' ground truths, executed by the service (agentdojo/demonstrations.py),
  as the conversation TRL's environment loop produces. Loss on the assistant turns only (not the tool
  results).

Rows longer than `trl.max_length` tokens are dropped, not truncated (a cut demonstration teaches no answer).
The checkpoint (model and tokenizer, its tool-calling template included) goes to `trl.output_dir`, where `run`
finds it (an RL config names this config as its `warmup`). Every logged step is appended to
`<output_dir>/metrics.jsonl`.

`python -m corrgrpo_trainer.sft generate` writes greedy completions of RLLA-4K or API-Bank prompts as the
JSONL that `python -m corrgrpo_devtools.match_metrics` scores.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from .agentdojo.tools import tool_calling_template
from .config import InputError
from .config_shape import AgentDojoWarmup, ToolcallDemonstrations, WarmupConfig
from .data import load_source
from .models import EMBEDDED, quiet
from .policy import device_args, load_policy
from .progress import metrics_callback

THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def shorten_think(output: str, sentences: int | None) -> str:
    """`output` with its first `<think>` cut to its first `sentences` sentences (None: unchanged)."""
    if not sentences:
        return output
    return THINK.sub(
        lambda m: f"<think> {' '.join(SENTENCE_END.split(m.group(1).strip())[:sentences])} </think>",
        output,
        1,
    )


def user_turns(source: str) -> set[str]:
    """The last user message of every row of an RLLA-4K source (what a demonstration must not repeat)."""
    return {str(prompt[-1]["content"]).strip() for prompt in load_source(source)["prompt"]}


def rlla_rows(spec: ToolcallDemonstrations) -> list[dict[str, Any]]:
    """ToolRL's warm-up set as prompt-completion chat rows, without the rows whose user turn an evaluation set
    has."""
    data = load_source(spec.path, spec.split)
    excluded = set().union(*(user_turns(source) for source in spec.exclude_prompts_of))
    rows = [
        {
            "prompt": [
                {"role": "system", "content": r["instruction"]},
                {"role": "user", "content": r["input"]},
            ],
            "completion": [
                {"role": "assistant", "content": shorten_think(r["output"], spec.think_sentences)}
            ],
        }
        for r in data
        if r["input"].strip() not in excluded
    ]
    repeats = len(data) - len(rows)
    print(f"[sft] {spec.path}: {len(rows)} of {len(data)} rows ({repeats} repeat an evaluation prompt)")
    return rows


def length(row: dict[str, Any], tokenizer: Any) -> int:
    """Tokens of a row as SFTTrainer renders it (its chat template, its tools)."""
    messages = row["messages"] if "messages" in row else row["prompt"] + row["completion"]
    tools = json.loads(row["tools"]) if row.get("tools") else None
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def select(
    rows: list[dict[str, Any]], tokenizer: Any, max_length: int | None, limit: int | None, seed: int
) -> list[dict[str, Any]]:
    """A seeded shuffle of the rows that fit in `max_length` tokens, the first `limit` of them."""
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    fitting = [row for row in shuffled if max_length is None or length(row, tokenizer) <= max_length]
    print(
        f"[sft] {len(fitting)} of {len(rows)} rows fit in {max_length} tokens; training on "
        f"{len(fitting[:limit])}"
    )
    return fitting[:limit]


def progress_line(state: Any, logs: dict[str, float]) -> str:
    """One SFT step: its loss and token accuracy."""
    accuracy = logs.get("mean_token_accuracy", float("nan"))
    return (
        f"[sft] step {state.global_step}/{state.max_steps}  loss={logs['loss']:.4f}  token_acc={accuracy:.3f}"
    )


def sft(config: WarmupConfig, progress: bool = True) -> Any:
    """Build the policy and the demonstrations of `config`, run TRL's SFTTrainer, save the checkpoint; the
    trainer."""
    from datasets import Dataset, Features, Json, List, Value, disable_progress_bars
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    disable_progress_bars()  # four bars over a few dozen rows: the step lines are the progress
    trl_args = dict(config.trl)
    features = None
    # the demonstrations before the policy: a missing dataset or service costs no policy load
    if isinstance(config, AgentDojoWarmup):
        from .agentdojo.demonstrations import demonstration_rows  # needs the agentdojo package

        rows = demonstration_rows(config)
        # tool arguments differ per call
        features = Features({"messages": List(Json()), "tools": Value("string")})
        trl_args.setdefault("assistant_only_loss", True)
    else:
        rows = rlla_rows(config.dataset)
    name = config.model
    model, tokenizer = load_policy(name, trl_args["output_dir"], config.threads)
    if config.domain.episodes:
        # the template the RL loop renders tools with. Saved with the checkpoint
        tool_calling_template(tokenizer)
    args = SFTConfig(**device_args(name) | trl_args)
    spec = config.dataset
    seed = args.seed if spec.seed is None else spec.seed
    rows = select(rows, tokenizer, args.max_length, spec.limit, seed)
    if not rows:
        raise InputError(f"no demonstration fits in trl.max_length={args.max_length} tokens")
    metrics_path = Path(args.output_dir) / "metrics.jsonl"
    step_log = metrics_callback(metrics_path, "loss", progress_line if progress else None)
    trainer = SFTTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_list(rows, features=features),
        callbacks=[step_log],
    )
    if progress:
        trainer.remove_callback(PrinterCallback)
    trainer.train()
    with quiet():  # model and tokenizer, which `model: <output_dir>` in an RL config loads; no shard bar
        trainer.save_model(args.output_dir)
    if progress:
        print(f"[sft] checkpoint: {args.output_dir} (`run` starts RL from it); metrics: {metrics_path}")
    return trainer


# ---------------------------------------------------------------- completions for the services' evaluators


def evaluation_prompts(dataset: str, source: str) -> list[list[dict[str, Any]]]:
    """Chat prompts of RLLA-4K (a parquet) or API-Bank level N (`api-bank-N`, the folder of ToolRL's JSON
    files), in the row order `python -m corrgrpo_devtools.match_metrics` scores them."""
    if dataset == "rlla4k":
        import pandas as pd

        return [[dict(m) for m in prompt] for prompt in pd.read_parquet(source)["prompt"]]
    level = dataset.removeprefix("api-bank-")
    records = json.loads((Path(source) / f"level-{level}-api_processed.json").read_text())
    return [
        [{"role": "system", "content": r["system"]}, {"role": "user", "content": r["user"]}] for r in records
    ]


def generate(
    model: Any, tokenizer: Any, prompts: Sequence[list[dict[str, Any]]], max_new_tokens: int, batch: int = 4
) -> Iterator[str]:
    """Greedy completions of chat prompts, left-padded in batches, yielded batch by batch."""
    tokenizer.padding_side = "left"
    for start in range(0, len(prompts), batch):
        chats = [
            tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
            for p in prompts[start : start + batch]
        ]
        encoded = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        with torch.no_grad():
            out = model.generate(
                **encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        yield from tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`generate`: greedy completions of the first rows of a tool-call dataset, as `{"completion": ...}`
    JSONL."""
    from .models import load_pretrained

    parser = argparse.ArgumentParser(prog="python -m corrgrpo_trainer.sft", description=main.__doc__)
    parser.add_argument("command", choices=["generate"])
    parser.add_argument(
        "--model", default=EMBEDDED, help="embedded default, a checkpoint or hub id (default: %(default)s)"
    )
    parser.add_argument(
        "--dataset", required=True, help="rlla4k | api-bank-1 | api-bank-2 | api-bank-3 (required)"
    )
    parser.add_argument("--source", required=True, help="RLLA-4K parquet, or the API-Bank folder (required)")
    parser.add_argument("--limit", type=int, help="the first LIMIT rows (default: all)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=128, help="completion tokens (default: %(default)s)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads on CPU (default: %(default)s)")
    parser.add_argument(
        "--batch", type=int, default=4, help="prompts per batched generate call (default: %(default)s)"
    )
    parser.add_argument("--output", required=True, help="JSONL file to write (required)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        torch.set_num_threads(args.threads)
    prompts = evaluation_prompts(args.dataset, args.source)[: args.limit]
    model, tokenizer = load_pretrained(
        args.model, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32
    )
    with Path(args.output).open("w") as handle:  # written as they come: a cut run still scores its first rows
        for completion in generate(model.eval(), tokenizer, prompts, args.max_new_tokens, args.batch):
            handle.write(json.dumps({"completion": completion}) + "\n")
            handle.flush()
    print(f"[generate] completions of the first {len(prompts)} {args.dataset} rows: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
