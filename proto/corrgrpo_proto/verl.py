"""verl reward functions backed by the corrgrpo services.

Point verl at them with
`custom_reward_function.path=<site-packages>/corrgrpo_proto/verl.py custom_reward_function.name=compute_score`
(per-item reward manager) or `name=compute_score_batch` with `reward_model.reward_manager=batch`
(one HTTP request per service per batch: preferred). Each returns `{"score": total, <component>: value, ...}`
so verl stores every component in `reward_extra_info`.

Routing: `extra_info["corrgrpo_service"]` when given, else the `data_source` (see `SOURCES`). Service
URLs come from `CORRGRPO_CODE_URL`, `CORRGRPO_TOOLCALL_URL`, `CORRGRPO_AGENTDOJO_URL` (defaults: the
local ports 8101-8103). Ground truth per service:
- code: a JSON object (an inline problem: task_id, prompt, entry_point, test, reference) or a task_id string;
- toolcall: the reference response text (ToolRL format);
- agentdojo: a JSON object `{suite, user_task, injection_task?, attack?}`; the trajectory's calls come from
  `extra_info["tool_calls"]` (`[{"function", "args"}]`) and the solution string is the final answer.
An item the service could not score raises `RuntimeError` naming it (a silently wrong reward is worse
than a failed step); with `CORRGRPO_VERL_ON_ERROR=zero` it gets score 0 and every component 0 instead,
and the reason in the `corrgrpo_error` column (empty for scored items), so every item has the same keys.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from functools import cache
from typing import Any

from .client import RewardClient

DEFAULT_URLS = {"code": "http://127.0.0.1:8101", "toolcall": "http://127.0.0.1:8102", "agentdojo": "http://127.0.0.1:8103"}
SOURCES = {
    "code": "code", "leetcode": "code", "newfacade/LeetCodeDataset": "code", "humaneval": "code",
    "openai_humaneval": "code", "toolcall": "toolcall", "rlla": "toolcall", "rlla_4k": "toolcall",
    "toolrl": "toolcall", "api_bank": "toolcall", "agentdojo": "agentdojo",
}  # fmt: skip


def service_for(data_source: str, extra_info: dict[str, Any] | None) -> str:
    """Which service scores this item; ValueError for a source nobody serves."""
    if extra_info and extra_info.get("corrgrpo_service"):
        return str(extra_info["corrgrpo_service"])
    for prefix, service in SOURCES.items():
        if data_source == prefix or data_source.startswith(prefix + "/") or data_source.startswith(prefix + "_"):
            return service
    raise ValueError(f"no corrgrpo service for data_source {data_source!r}; set extra_info['corrgrpo_service']")


def build_item(service: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None) -> dict[str, Any]:
    """The wire item of `service` for one verl sample."""
    extra = extra_info or {}
    if service == "code":
        parsed = _maybe_json(ground_truth)
        target = {"problem": parsed} if isinstance(parsed, dict) else {"task_id": str(ground_truth)}
        return {"completion": solution_str, **target}
    if service == "toolcall":
        return {"completion": solution_str, "ground_truth": str(ground_truth)}
    if service == "agentdojo":
        spec = _maybe_json(ground_truth)
        if not isinstance(spec, dict):
            raise ValueError("agentdojo ground_truth must be a JSON object {suite, user_task, ...}")
        return {**spec, "tool_calls": extra.get("tool_calls", []), "final_answer": solution_str}
    raise ValueError(f"unknown corrgrpo service {service!r}")


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@cache
def _client(service: str) -> RewardClient:
    url = os.environ.get(f"CORRGRPO_{service.upper()}_URL", DEFAULT_URLS[service])
    return RewardClient(url, token=os.environ.get("CORRGRPO_API_TOKEN"))


def compute_score_batch(
    data_sources: list[str], solution_strs: list[str], ground_truths: list[Any], extra_infos: list[dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """Score a verl batch: one request per service, results in the batch's order."""
    by_service: dict[str, list[int]] = defaultdict(list)
    items: list[dict[str, Any]] = []
    for index, (source, solution, truth, extra) in enumerate(
        zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)
    ):
        service = service_for(source, extra)
        by_service[service].append(index)
        items.append(build_item(service, solution, truth, extra))
    zero_on_error = os.environ.get("CORRGRPO_VERL_ON_ERROR", "raise") == "zero"
    scores: list[dict[str, Any]] = [{} for _ in items]
    for service, indices in by_service.items():
        client = _client(service)
        for index, result in zip(indices, client.score([items[i] for i in indices]), strict=True):
            if result.error is None:
                scores[index] = {"score": float(result.total or 0.0), **(result.components or {}), "corrgrpo_error": ""}
                continue
            reason = f"{result.error.code}: {result.error.message}"
            if not zero_on_error:
                raise RuntimeError(f"{service} could not score item {index} ({data_sources[index]}): {reason}")
            zeros = {spec.name: 0.0 for spec in client.components().components}
            scores[index] = {"score": 0.0, **zeros, "corrgrpo_error": reason}
    return scores


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None
) -> dict[str, Any]:
    """verl's per-item `compute_score` signature."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]
