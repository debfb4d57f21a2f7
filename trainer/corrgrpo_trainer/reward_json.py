"""The `advantages` command's JSON: rewards [B][G][K] read strictly, advantages and diagnostics written
strict.

What other stacks send is untrusted input: every malformation is an InputError naming its place, never a
traceback or a parser's recursion limit.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .advantages import ESTIMATORS, diagnostics
from .config import InputError

MAX_NESTING = 4  # {"rewards": [B][G][K]}: an object around three lists. Anything deeper is not this input


def _number(value: Any, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number or null, got {json.dumps(value)[:40]}")
    if not math.isfinite(number := float(value)):
        raise InputError(f"{where}: a number too large for a 64-bit float (expected a finite number or null)")
    return number


def parse_rewards(raw: Any) -> list[list[list[float]]]:
    """A rectangular [B][G][K] list of numbers (null = missing, NaN), or InputError naming the first bad
    place."""
    shape: list[int | None] = [None, None]

    def rows(value: Any, where: str, level: int) -> list[Any]:
        what = ("groups [B]", "rollouts [G] of a group", "components [K] of a rollout")[level]
        if not isinstance(value, list) or not value:
            raise InputError(f"{where}: expected a non-empty list of {what}, got {json.dumps(value)[:40]}")
        if level and shape[level - 1] not in (None, len(value)):
            raise InputError(
                f"{where}: {len(value)} {what.split()[0]}, the first had {shape[level - 1]} (ragged)"
            )
        if level:
            shape[level - 1] = len(value)
        return value

    return [
        [
            [
                _number(v, f"rewards[{b}][{g}][{k}]")
                for k, v in enumerate(rows(rollout, f"rewards[{b}][{g}]", 2))
            ]
            for g, rollout in enumerate(rows(group, f"rewards[{b}]", 1))
        ]
        for b, group in enumerate(rows(raw, "rewards", 0))
    ]


def load_rewards(payload: Any) -> tuple[torch.Tensor, list[float] | None, list[str] | None]:
    """Rewards [B][G][K] (null = missing) from a nested list or {"rewards", "weights"?, "names"?}."""
    if isinstance(payload, dict) and "rewards" not in payload:
        raise InputError(
            'expected a [B][G][K] list or an object with "rewards" (and optional "weights", "names")'
        )
    body = payload if isinstance(payload, dict) else {"rewards": payload}
    rewards = torch.tensor(parse_rewards(body["rewards"]), dtype=torch.float64)
    weights, names = body.get("weights"), body.get("names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InputError("names: expected a list of strings")
    if isinstance(weights, dict):
        names = names or list(weights)
        missing = [n for n in names if n not in weights]
        if missing:
            raise InputError(f"weights: no weight for {missing}")
        weights = [weights[n] for n in names]
    if weights is not None:
        if not isinstance(weights, list):
            raise InputError(
                f"weights: expected a list of K numbers or {{name: weight}}, got {json.dumps(weights)[:40]}"
            )
        weights = [_number(w, f"weights[{i}]") for i, w in enumerate(weights)]
    for label, values in (("weights", weights), ("names", names)):
        if values is not None and len(values) != rewards.shape[-1]:
            raise InputError(f"{len(values)} {label} for K = {rewards.shape[-1]} components")
    return rewards, weights, names


def advantages_report(payload: Any, estimators: Sequence[str]) -> dict[str, Any]:
    """{"advantages": {estimator: [B][G]}, "diagnostics": {...}}. Each estimator applies the weights its own
    way."""
    rewards, weights, names = load_rewards(payload)
    advantages = {name: ESTIMATORS[name](rewards, weights).tolist() for name in estimators}
    return {
        "shape": list(rewards.shape),
        "advantages": advantages,
        "diagnostics": diagnostics(rewards, weights, names=names),
    }


def nesting(value: Any) -> int:
    """How deep lists and objects nest in `value` (a number: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _no_constant(name: str) -> None:
    raise InputError(f"{name} is not a JSON number (a missing reward is null)")


def read_json(source: str) -> Any:
    """The JSON in a file ("-" = stdin), or InputError with the reason: unreadable, not UTF-8, not strict JSON
    (NaN, Infinity), or nested deeper than the input can be (the parser's recursion is never the limit)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{source} is not UTF-8 text: {error.reason} at byte {error.start}") from None
    too_deep = InputError(
        f'{source}: nested deeper than {MAX_NESTING} levels (expected [B][G][K] or {{"rewards": [B][G][K]}})'
    )
    try:
        # Integers as floats: a 5,000-digit integer is then a number too large (not Python's digit-limit
        # message).
        payload = json.loads(text, parse_int=float, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise InputError(f"{source} is not JSON: {error}") from None
    except InputError as error:
        raise InputError(f"{source}: {error}") from None
    except RecursionError:
        raise too_deep from None
    if nesting(payload) > MAX_NESTING:
        raise too_deep
    return payload


def strict_json(value: Any) -> Any:
    """NaN and ±inf as null: JSON has no such numbers, and other stacks' parsers refuse Python's `NaN`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [strict_json(item) for item in value]
    return value
