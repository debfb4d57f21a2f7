"""`python -m corrgrpo_trainer rescore RUN_DIR`: a run's kept rollouts scored again. Per component, how many
changed.

A reward change (a new grader, a fixed bug, another deployment) checked against real past rollouts before it
trains anything: the rollouts go through the run's own reward columns (rewards.py, the services of its
`config.resolved.yaml`; `--url NAME=URL` points a service elsewhere, with the token of `--token-file` or none:
the run's token goes to the run's services only), one request per service per step as in training. A value
changed when it differs at float32 precision (the kept values went through TRL's float32 reward tensor) or
became missing or scored. A stage when the service's `info.stage` differs. The counts are printed and every
change is written to `<run_dir>/rescore.json`. AgentDojo rollouts are multi-turn episodes whose tool results
came from the service: they cannot be sent again.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import InputError
from .config_shape import Domain, Service
from .rewards import STAGE_COLUMN, RewardColumn, check_services, client_options, service_rewards
from .rundir import RESOLVED_CONFIG, Run, read_run

RESCORED = "rescore.json"


@dataclass(frozen=True)
class Change:
    step: int
    group: int
    prompt_id: str
    column: str  # a component, or stage/<service>
    before: Any
    after: Any


def services_of(run: Run, urls: Mapping[str, str], token_file: str | None = None) -> dict[str, Service]:
    """The run's configured services (config.resolved.yaml), with `urls` (service name -> URL) replacing
    theirs. The run's token goes only to the run's own URLs: a service moved to another URL gets the one in
    `token_file`, or none."""
    try:
        config = yaml.safe_load(run.file(RESOLVED_CONFIG).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise InputError(
            f"{run.path}: cannot read {RESOLVED_CONFIG} ({type(error).__name__}): the run's services"
        ) from None
    if Domain(config["domain"]).episodes:
        raise InputError(
            "AgentDojo rollouts are multi-turn episodes played against the service: they cannot be sent again"
        )
    services = {
        name: Service.model_validate(without_token(spec)) for name, spec in config["services"].items()
    }
    if not all(urls.values()):
        raise InputError("--url: expected NAME=URL, e.g. --url code=http://127.0.0.1:9101")
    if unknown := sorted(set(urls) - set(services)):
        raise InputError(f"--url {', '.join(unknown)}: the run's services are {', '.join(services)}")
    moved = (
        client_options(Service(url="", client={"token_file": token_file})).get("token")
        if token_file
        else None
    )
    for name, url in urls.items():
        services[name] = services[name].model_copy(update={"url": url}).with_token(moved)
    return services


def without_token(spec: dict[str, Any]) -> dict[str, Any]:
    """A service of a run's config without the `client.token` an older run kept."""
    client = {key: value for key, value in (spec.get("client") or {}).items() if key != "token"}
    return spec | {"client": client}


async def score_step(
    columns: Sequence[RewardColumn], rollouts: Sequence[dict[str, Any]], run: Run
) -> tuple[list[list[float | None]], dict[str, list[Any]]]:
    """Each column's values of one step's rollouts, called as TRL calls them, and the stages the columns
    logged."""
    rows = [run.prompts[r["prompt_id"]] for r in rollouts]
    fields = {key: [row["columns"][key] for row in rows] for key in rows[0]["columns"]}
    prompts, completions = [row["prompt"] for row in rows], [r["completion"] for r in rollouts]
    stages: dict[str, list[Any]] = {}
    calls = (
        c(prompts=prompts, completions=completions, log_extra=stages.__setitem__, **fields) for c in columns
    )
    return list(await asyncio.gather(*calls)), stages


def changed(before: Any, after: Any) -> bool:
    if before is None or after is None or isinstance(before, str) or isinstance(after, str):
        return before != after
    return float32(before) != float32(after)


def float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


async def compare(columns: Sequence[RewardColumn], run: Run) -> list[Change]:
    steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for rollout in run.rollouts:
        steps[rollout["step"]].append(rollout)
    changes = []
    for step, rollouts in sorted(steps.items()):
        values, stages = await score_step(columns, rollouts, run)
        for index, rollout in enumerate(rollouts):
            now = {c.__name__: v[index] for c, v in zip(columns, values, strict=True)}
            now |= {column: stage[index] for column, stage in stages.items()}
            before = rollout["components"] | {
                f"{STAGE_COLUMN}{s}": stage for s, stage in rollout["stage"].items()
            }
            for column, after in now.items():
                if changed(before.get(column), after):
                    changes.append(
                        Change(
                            step, rollout["group"], rollout["prompt_id"], column, before.get(column), after
                        )
                    )
    return changes


def rescore(
    run_dir: str | Path, urls: Mapping[str, str] | None = None, token_file: str | None = None
) -> dict[str, Any]:
    """Score the run's rollouts again. The summary written to `<run_dir>/rescore.json` (also returned)."""
    run = read_run(run_dir)
    if not run.rollouts:
        raise InputError(
            f"{run_dir}: rollouts.jsonl is empty (the run ended before its first step was scored)"
        )
    services = services_of(run, urls or {}, token_file)
    check_services(services)
    columns, _ = service_rewards(services)
    if (names := [c.__name__ for c in columns]) != run.components:
        raise InputError(f"the services now give the columns {names}, the run kept {run.components}")
    changes = asyncio.run(compare(columns, run))
    counts = {name: 0 for name in run.components} | {
        f"{STAGE_COLUMN}{s}": 0 for s in run.rollouts[0]["stage"]
    }
    for change in changes:
        counts[change.column] = counts.get(change.column, 0) + 1
    summary = {
        "rollouts": len(run.rollouts),
        "services": {name: spec.url for name, spec in services.items()},
        "changed": counts,
        "changes": [asdict(change) for change in changes],
    }
    run.file(RESCORED).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def summary_table(summary: dict[str, Any]) -> str:
    """Per column: how many of the rollouts changed."""
    where = ", ".join(f"{name} at {url}" for name, url in summary["services"].items())
    lines = [
        f"[rescore] {summary['rollouts']} rollouts sent again to {where}",
        f"{'column':<24}{'changed':>9}{'of':>7}",
    ]
    lines += [
        f"{column:<24}{count:>9}{summary['rollouts']:>7}" for column, count in summary["changed"].items()
    ]
    return "\n".join(lines)
