"""`make demo`: a real pretrained policy learning against the live reward services, on CPU, in a few minutes.

1. Starts the code and toolcall services as local processes (corrgrpo_testing.servers, in-memory store) and,
   meanwhile, resolves the embedded SmolLM2-135M-Instruct (converted once into ~/.cache/corrgrpo).
2. Scores hand-made groups (HumanEval canonical solutions and perturbations; right and wrong tool calls)
   and prints GRPO, GDPO and CorrGRPO advantages side by side.
3. Trains the policy a few CorrGRPO steps on HumanEval prompts against the live code service: per step,
   each component's mean, the fraction of zero-variance groups and the mean |advantage|.
4. Writes demo_out/demo.png and ends with what each column meant and which isolation the code service used.

A part whose service does not start or score is reported and skipped; the rest still runs.

One file of ~330 lines on purpose: the example a newcomer reads top-down, steps 1-4 in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from corrgrpo_proto import AsyncRewardClient, RewardServiceError, RewardServiceUnavailable
from corrgrpo_testing.servers import ServiceProcess, launch
from corrgrpo_testing.tasks import HUMANEVAL, humaneval_problems, humaneval_rows
from corrgrpo_trainer.advantages import corrgrpo, gdpo, grpo
from corrgrpo_trainer.models import EMBEDDED, PolicyLoadError, resolve_model

OUT = Path("demo_out")
SERVICES = ("code", "toolcall")  # the two this demo scores with; AgentDojo has its own tests and bench
HUMANEVAL_TASKS = ("HumanEval/0", "HumanEval/2", "HumanEval/7", "HumanEval/28")
TRAIN_STEPS = int(os.environ.get("CORRGRPO_DEMO_STEPS", "3"))
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[demo {time.monotonic() - STARTED:5.0f} s] {text}", flush=True)


@dataclass
class Group:
    """One prompt's rollouts: a label and a service item per rollout."""

    title: str
    labels: list[str]
    items: list[dict[str, Any]]


@dataclass
class Scored:
    """A domain's groups scored: rewards [B, G, K] (NaN = failed item), component names and default
    weights."""

    groups: list[Group]
    rewards: torch.Tensor
    names: list[str]
    weights: list[float]


# ---------------------------------------------------------------- hand-made rollouts


def code_groups() -> list[Group]:
    """HumanEval problems (inline): the canonical solution and four perturbations that break one stage
    each."""
    problems = {p["task_id"]: p for p in humaneval_problems()}
    groups = []
    for task_id in HUMANEVAL_TASKS:
        p = problems[task_id]
        canonical = p["prompt"] + p["canonical_solution"]
        variants = {
            "canonical": f"```python\n{canonical}```",
            "unfenced": canonical,
            "wrong": f"```python\n{p['prompt']}    return None\n```",
            "crash": f"```python\n{p['prompt']}    raise ValueError('perturbed')\n```",
            "syntax": f"```python\n{canonical}    return (\n```",
        }
        problem = {
            "task_id": task_id,
            "prompt": "",
            "entry_point": p["entry_point"],
            "test": p["test"],
            "reference": canonical,
        }
        items = [{"completion": text, "problem": problem} for text in variants.values()]
        groups.append(Group(f"{task_id} ({p['entry_point']})", list(variants), items))
    return groups


TOOL_CASES = [
    (
        "What's the weather in Paris, in celsius?",
        [{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}],
    ),
    (
        "Find a flight from SFO to JFK on May 1 and book a hotel in New York for 2 nights.",
        [
            {
                "name": "search_flights",
                "parameters": {"origin": "SFO", "destination": "JFK", "date": "2024-05-01"},
            },
            {"name": "book_hotel", "parameters": {"city": "New York", "nights": 2}},
        ],
    ),
    (
        "Email ana@example.com with the subject 'Hi'.",
        [{"name": "send_email", "parameters": {"to": "ana@example.com", "subject": "Hi"}}],
    ),
]


def tool_response(calls: list[dict[str, Any]], think: bool = True) -> str:
    lines = "\n".join(json.dumps(call) for call in calls)
    return (
        "<think>I should call the tools.</think>\n" if think else ""
    ) + f"<tool_call>\n{lines}\n</tool_call>"


def tool_variants(calls: list[dict[str, Any]]) -> dict[str, str]:
    """The right answer and five wrong ones, each wrong in a different component."""
    first, rest = calls[0], calls[1:]
    key = next(iter(first["parameters"]))
    wrong_value = {**first, "parameters": {**first["parameters"], key: "somewhere else"}}
    return {
        "exact": tool_response(calls),
        "no_think": tool_response(calls, think=False),
        "wrong_value": tool_response([wrong_value, *rest]),
        "no_params": tool_response([{"name": first["name"], "parameters": {}}, *rest]),
        "wrong_tool": tool_response([{"name": "lookup_news", "parameters": {"page": 1}}]),
        "bad_json": tool_response(calls)[:-20],
    }


def toolcall_groups() -> list[Group]:
    groups = []
    for question, calls in TOOL_CASES:
        truth, variants = tool_response(calls), tool_variants(calls)
        groups.append(
            Group(
                question,
                list(variants),
                [{"completion": v, "ground_truth": truth} for v in variants.values()],
            )
        )
    return groups


# ---------------------------------------------------------------- scoring and advantages


async def score_groups(url: str, groups: list[Group]) -> Scored:
    """All groups of one service in one request; a failed item becomes a row of NaN."""
    async with AsyncRewardClient(url, retries=2, timeout=180) as client:
        specs = (await client.components()).components
        results = await client.score([item for group in groups for item in group.items])
    names = [spec.name for spec in specs]
    values = [
        [(r.components or {}).get(n, float("nan")) if r.error is None else float("nan") for n in names]
        for r in results
    ]
    for result in results:
        if result.error is not None:
            say(f"  item failed: {result.error.code}: {result.error.message[:120]}")
    rewards = torch.tensor(values, dtype=torch.float64).view(len(groups), len(groups[0].items), len(names))
    return Scored(groups, rewards, names, [spec.weight for spec in specs])


async def score_domains(urls: dict[str, str]) -> dict[str, Scored]:
    """Code and toolcall at the same time; a domain whose service is down or refuses is reported and left
    out."""
    wanted = {"code": code_groups, "toolcall": toolcall_groups}
    domains = [name for name in wanted if name in urls]
    outcomes = await asyncio.gather(
        *(score_groups(urls[d], wanted[d]()) for d in domains), return_exceptions=True
    )
    scored = {}
    for domain, outcome in zip(domains, outcomes, strict=True):
        if isinstance(outcome, (RewardServiceError, RewardServiceUnavailable)):
            say(f"{domain}: scoring failed, skipping this part: {outcome}")
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            scored[domain] = outcome
    return scored


def estimator_advantages(scored: Scored) -> dict[str, torch.Tensor]:
    """[B, G] advantages of each estimator on the same rewards and weights."""
    weights = torch.tensor(scored.weights, dtype=scored.rewards.dtype)
    return {
        name: estimator(scored.rewards, weights)
        for name, estimator in (("GRPO", grpo), ("GDPO", gdpo), ("CorrGRPO", corrgrpo))
    }


def print_domain(domain: str, scored: Scored, advantages: dict[str, torch.Tensor]) -> None:
    short = [n[:8] for n in scored.names]
    print(f"\n=== {domain}: components {', '.join(scored.names)} (weights {scored.weights})")
    for b, group in enumerate(scored.groups):
        print(f"--- {group.title}")
        print(
            f"{'rollout':12s}"
            + "".join(f"{s:>9s}" for s in short)
            + f"{'R':>8s}"
            + "".join(f"{e:>10s}" for e in advantages)
        )
        for g, label in enumerate(group.labels):
            r = scored.rewards[b, g]
            total = (r.nan_to_num(0.0) * torch.tensor(scored.weights, dtype=r.dtype)).sum().item()
            cells = "".join(f"{v:9.3f}" for v in r.tolist())
            print(
                f"{label:12s}{cells}{total:8.3f}"
                + "".join(f"{a[b, g].item():10.3f}" for a in advantages.values())
            )


# ---------------------------------------------------------------- training, plot, summary


def train_policy(url: str, model: str) -> list[dict[str, Any]]:
    """A few CorrGRPO steps of the real policy on HumanEval prompts against the code service; TRL's log
    history. The run directory is a run's like any other (config.resolved.yaml too): `report` and `rescore`
    read it."""
    from corrgrpo_trainer.config import parse_config
    from corrgrpo_trainer.config_shape import RLConfig
    from corrgrpo_trainer.pipeline import write_resolved
    from corrgrpo_trainer.train import train

    config = {
        "domain": "code",
        "model": model,
        "torch_threads": 1,  # fastest on loaded cores (2 threads were 2x slower here)
        "dataset": {"path": HUMANEVAL},  # its rows are given to train() below
        "services": {"code": {"url": url, "client": {"retries": 2, "timeout": 300}}},
        "estimator": "corrgrpo",
        "trl": {
            "output_dir": str(OUT / "train"),
            "seed": 0,
            "max_steps": TRAIN_STEPS,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 96,
            "learning_rate": 2e-5,
            "temperature": 1.0,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": not torch.cuda.is_available(),
            "disable_tqdm": True,
            "gradient_checkpointing": False,
        },
    }
    typed = typing.cast(RLConfig, parse_config(config))
    write_resolved(typed, typed.run_path)
    return train(typed, rows=humaneval_rows(10, 10 + 2 * TRAIN_STEPS)).state.log_history


def plot(
    path: Path, history: list[dict[str, Any]] | None, scored: dict[str, Scored], advantages: dict[str, dict]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 + len(scored)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    curves = axes[0, 0]
    steps = [h for h in history or [] if "reward" in h]
    for key in sorted({k for h in steps for k in h if k.startswith("rewards/") and k.endswith("/mean")}):
        curves.plot([h["step"] for h in steps], [h[key] for h in steps], marker="o", label=key.split("/")[1])
    curves.set(
        title="SmolLM2-135M-Instruct, CorrGRPO on HumanEval: reward per component",
        xlabel="step",
        ylabel="mean",
    )
    curves.legend(fontsize=8) if steps else curves.text(
        0.5, 0.5, "training skipped", ha="center", transform=curves.transAxes
    )
    for axis, (domain, result) in zip(axes[0, 1:], scored.items(), strict=True):
        labels = [f"{b}:{label}" for b, group in enumerate(result.groups) for label in group.labels]
        width = 0.8 / len(advantages[domain])
        for i, (name, values) in enumerate(advantages[domain].items()):
            axis.bar(
                [x + i * width for x in range(len(labels))], values.flatten().tolist(), width, label=name
            )
        axis.set_xticks([x + width for x in range(len(labels))], labels, rotation=90, fontsize=6)
        axis.set(title=f"{domain}: advantages per hand-made rollout (group:variant)", ylabel="advantage")
        axis.axhline(0, color="black", linewidth=0.5)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def isolation(url: str | None) -> str:
    """How the code service sandboxes candidates: its /readyz `sandbox` check (the isolation's name, or why
    not ready)."""
    if url is None:
        return "unknown (the code service did not start)"
    try:
        check = httpx.get(f"{url}/readyz", timeout=10).json()["checks"]["sandbox"]
    except (httpx.HTTPError, KeyError, ValueError) as error:
        return f"unknown ({type(error).__name__})"
    return f"{check} (candidates ran in bubblewrap; see sandbox/README.md)" if check == "bwrap" else check


def summary(code_url: str | None, trained: bool) -> str:
    lines = [
        "",
        "What you just saw",
        "  scored groups  each row is one rollout of a prompt; the columns are the service's reward "
        "components",
        "                 (code: format, syntax, compile, runtime, correct, ast_similarity, efficiency), R "
        "their",
        "                 weighted sum, then each estimator's advantage: GRPO divides R - mean by std R, "
        "CorrGRPO",
        "                 by sqrt(sum of the components' correlations), GDPO z-scores each component first.",
    ]
    if trained:
        lines += [
            "  [train] lines  one CorrGRPO step of SmolLM2-135M-Instruct: 2 HumanEval prompts x 4 sampled "
            "completions;",
            "                 <component>= its batch mean, zero_std_groups= the fraction of prompt groups "
            "whose total",
            "                 reward did not vary (their advantages are 0, nothing to learn), |A|= mean "
            "|advantage|.",
            "                 Each step draws new prompts, so 3 steps' means show the signal, not yet "
            "learning:",
            "                 bench/bench_policy.py compares the estimators on held-out prompts "
            "(docs/policy_experiment.md).",
        ]
    lines += [
        f"  code sandbox   {isolation(code_url)}",
        f"  files          {OUT / 'demo.png'} (plot), {OUT / 'train' / 'metrics.jsonl'} (every step's "
        f"metrics),",
        f"                 {OUT}/<service>.log (service logs)",
    ]
    return "\n".join(lines)


def start(name: str) -> ServiceProcess:
    # the embedded default: in-memory store
    env = {k: v for k, v in os.environ.items() if k != "CORRGRPO_REDIS_URL"}
    return launch(name, env, log_path=str(OUT / f"{name}.log"))


def up(service: ServiceProcess) -> str | None:
    try:
        service.wait_healthy(150)
    except (RuntimeError, TimeoutError) as error:
        say(f"{service.name} did not start: {error} (log: {service.log_path})")
        return None
    say(f"{service.name} up at {service.url}")
    return service.url


def main() -> int:
    OUT.mkdir(exist_ok=True)
    say(f"[1/4] starting {', '.join(SERVICES)} (logs in {OUT}/) and resolving the policy {EMBEDDED!r}")
    services = {name: start(name) for name in SERVICES}
    try:
        try:
            model = resolve_model(EMBEDDED)
        except PolicyLoadError as error:
            say(f"no policy, training will be skipped: {error}")
            model = None
        urls = {name: url for name, service in services.items() if (url := up(service))}
        say("[2/4] scoring hand-made groups, one request per service")
        scored = asyncio.run(score_domains(urls))
        advantages = {domain: estimator_advantages(result) for domain, result in scored.items()}
        for domain, result in scored.items():
            print_domain(domain, result, advantages[domain])
        history = None
        if "code" in urls and model:
            say(
                f"[3/4] training {TRAIN_STEPS} CorrGRPO steps of SmolLM2-135M-Instruct on HumanEval (~40 s "
                f"of CPU each)"
            )
            history = train_policy(urls["code"], model)
        else:
            say("[3/4] training skipped (no code service or no policy)")
        plot(OUT / "demo.png", history, scored, advantages)
        say(f"[4/4] wrote {OUT / 'demo.png'}")
        print(summary(urls.get("code"), history is not None))
    finally:
        for service in services.values():
            service.stop()
    say("services stopped")
    return 0 if scored else 1


if __name__ == "__main__":
    sys.exit(main())
