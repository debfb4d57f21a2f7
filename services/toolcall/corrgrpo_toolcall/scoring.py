"""Pure scoring of ToolRL / RLLA-4K responses: `format` and the three matching components.

ToolRL (Qian et al. 2025) scores a response against its ground truth with one correctness number
`6·s/S_max − 3`, `s = s_name + s_params + s_values`. CorrGRPO's fork (`verl/utils/reward_score/rlla.py`
of HKUST-KnowComp/CorrGRPO) splits it into three components, each its own matching score normalised
by its own maximum and mapped onto a fixed range: `name` = s_name − 0.5 ∈ [−0.5, 0.5],
`param_names` = 2·s_params/|gt calls| − 1 ∈ [−1, 1], `param_values` = 3·s_values/Σparams − 1.5 ∈
[−1.5, 1.5] (1.5 when the ground truth's calls take no parameters: nothing to get wrong). An exact
match puts all three at their maximum, an unparseable prediction at their minimum; ToolRL's single
correctness stays available (`Matching.toolrl_correctness`).

Differences from the authors, on purpose:
- JSON `true`/`false` never equal the numbers 1/0 (their `==` has `True == 1`); 1 and 1.0 are the
  same JSON number and do compare equal.
- work is bounded: a completion over `ParseCaps.max_chars` characters or a `<tool_call>` block over
  `ParseCaps.max_calls` lines is scored as unparseable (format 0, components at their minimum).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .calls import ParseCaps, ToolCall, Unparseable, parse_calls
from .matching import RANGES, Matching, match, param_count
from .response import FormatRules, extract_response, format_score

DEFAULT_RULES, DEFAULT_CAPS = FormatRules(), ParseCaps()


@dataclass(frozen=True)
class Score:
    format: float
    components: dict[str, float]  # name, param_names, param_values
    matching: Matching | None  # None when the ground truth has no tool call
    reason: str | None = None  # why the prediction was unparseable, if it was

    def as_dict(self) -> dict[str, float]:
        return {"format": self.format, **self.components}


def _zero() -> dict[str, float]:
    return {"name": 0.0, "param_names": 0.0, "param_values": 0.0}


def score(
    completion: str, ground_truth: str, rules: FormatRules = DEFAULT_RULES, caps: ParseCaps = DEFAULT_CAPS
) -> Score:
    """Score one completion (raw or chat-template-wrapped) against its ground truth.

    Raises `Unparseable` when the ground truth has a `<tool_call>` block that does not parse.
    """
    return score_group([completion], ground_truth, rules, caps)[0]


def score_group(
    completions: Sequence[str],
    ground_truth: str,
    rules: FormatRules = DEFAULT_RULES,
    caps: ParseCaps = DEFAULT_CAPS,
) -> list[Score]:
    """Score completions that share a ground truth (a GRPO group): the ground truth is parsed once."""
    truth = _truth_calls(ground_truth) if "<tool_call>" in ground_truth else None
    return [_score(completion, ground_truth, truth, rules, caps) for completion in completions]


def _score(
    completion: str, ground_truth: str, truth: Sequence[ToolCall] | None, rules: FormatRules, caps: ParseCaps
) -> Score:
    if len(completion) > caps.max_chars:
        return _unmatched(0.0, truth, f"completion over {caps.max_chars} characters")
    response = extract_response(completion)
    fmt = format_score(response, ground_truth, rules)
    if truth is None:  # ToolRL: a ground truth without tool calls gives correctness 0
        return Score(fmt, _zero(), None)
    try:
        matching = match(truth, parse_calls(response, caps.max_calls, strict=False))
    except Unparseable as error:
        return _unmatched(fmt, truth, str(error))
    return Score(fmt, matching.components(), matching)


# Parsed JSON can take ~20x its text (`[[],[],...]`): 256 cached ground truths of 4 KB stay under ~25 MB.
CACHED_TRUTH_CHARS = 4096


def _truth_calls(ground_truth: str) -> tuple[ToolCall, ...]:
    """Parsed ground truth, cached across requests when short. Callers must not mutate."""
    if len(ground_truth) > CACHED_TRUTH_CHARS:
        return tuple(parse_calls(ground_truth, max_calls=None))
    return _cached_truth_calls(ground_truth)


@lru_cache(maxsize=256)
def _cached_truth_calls(ground_truth: str) -> tuple[ToolCall, ...]:
    return tuple(parse_calls(ground_truth, max_calls=None))


def _unmatched(fmt: float, truth: Sequence[ToolCall] | None, reason: str) -> Score:
    """No usable prediction: every component at its minimum (ToolRL's correctness −3), 0 without ground-truth
    calls.

    Minimum even for `param_values` of parameterless calls, which a parsed prediction gets vacuously right."""
    if truth is None:
        return Score(fmt, _zero(), None, reason)
    nothing = Matching(0.0, 0.0, 0.0, len(truth), param_count(truth))
    return Score(fmt, {key: low for key, (low, _) in RANGES.items()}, nothing, reason)
