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

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# (start of the assistant turn, end of a turn) for the chat templates we unwrap.
TURN_MARKERS = (
    ("<|im_start|>assistant", "<|im_end|>"),  # Qwen / ChatML
    ("<|start_header_id|>assistant<|end_header_id|>", "<|eot_id|>"),  # Llama 3
)


@dataclass(frozen=True)
class ParseCaps:
    """Bounds on the work one item may cause."""

    max_chars: int = 200_000
    max_calls: int = 64


@dataclass(frozen=True)
class FormatRules:
    """CorrGRPO's format pattern by default: any whitespace between the tag blocks (ToolRL's wants one newline).

    The fork accepts a response without the opening `<think>` when the model's name contains "think"
    (the template of a thinking model opens it); we cannot see the model, so that is a setting.
    """

    lenient_separators: bool = True  # `\s*` instead of exactly `\n` between the tag blocks
    optional_think_open: bool = False  # thinking models whose template already opened `<think>`


@dataclass(frozen=True)
class ToolCall:
    """One call. A prediction's call may be foreign: a `name` that is not a string (None here: it can match
    nothing, only counts in the name union) or `parameters` that are not an object (None); the authors fail a
    prediction on such a call only when matching reads it, which `match` does the same way."""

    name: str | None
    parameters: dict[str, Any] | None


class Unparseable(ValueError):
    """The text has no well-formed `<tool_call>` block of JSON calls."""


@dataclass(frozen=True)
class Matching:
    """Raw matching scores of a prediction against the ground truth, and their maxima."""

    s_name: float
    s_params: float
    s_values: float
    gt_calls: int
    gt_params: int

    @property
    def s_max(self) -> int:
        return 1 + self.gt_calls + self.gt_params

    @property
    def exact(self) -> bool:
        return self.s_name == 1 and self.s_params == self.gt_calls and self.s_values == self.gt_params

    @property
    def toolrl_correctness(self) -> float:
        """ToolRL's single correctness `6·s/S_max − 3` in [−3, 3] (3 when exact)."""
        return 6 * (self.s_name + self.s_params + self.s_values) / self.s_max - 3

    def components(self) -> dict[str, float]:
        """Each matching score over its own maximum, mapped onto its component's range (`RANGES`)."""
        fractions = {
            "name": self.s_name,
            "param_names": self.s_params / self.gt_calls,
            "param_values": self.s_values / self.gt_params if self.gt_params else 1.0,  # vacuously right
        }
        return {key: low + (high - low) * fractions[key] for key, (low, high) in RANGES.items()}


# Each component's range, as the authors fix it (their total spans ToolRL's [−3, 3]).
RANGES = {"name": (-0.5, 0.5), "param_names": (-1.0, 1.0), "param_values": (-1.5, 1.5)}


# End-of-sequence and end-of-turn tokens of common tokenizers. A completion decoded with special tokens
# kept (OpenRLHF does) ends in one or several (end of turn, then EOS or padding); they never change a score.
END_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
    "<end_of_turn>", "<eos>", "<｜end▁of▁sentence｜>",
)  # fmt: skip


def strip_end_tokens(text: str) -> str:
    """`text` without the end tokens (and whitespace) it ends with; linear in their length."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        token = next((t for t in END_TOKENS if end >= len(t) and text.startswith(t, end - len(t))), None)
        if token is None:
            return text[:end]
        end -= len(token)


def extract_response(text: str) -> str:
    """The assistant's reply: text after the last assistant-turn marker, before the end-of-turn marker.

    Raw completions pass through (stripped of trailing end tokens), as in ToolRL, which also cuts at `<|im_end|>`.
    """
    text = strip_end_tokens(text)
    for start, end in TURN_MARKERS:
        if start in text:
            text = text.rsplit(start, 1)[1]
        if end in text:
            text = text.split(end, 1)[0]
    return text.strip()


@lru_cache(maxsize=8)
def _format_tails(rules: FormatRules) -> dict[tuple[bool, bool], re.Pattern[str]]:
    """What must follow `</think>` in ToolRL's patterns, keyed by (ground truth has `<tool_call>`, has `<response>`)."""
    gap = r"\s*" if rules.lenient_separators else r"\n"
    calls = r"<tool_call>\n.*?\n</tool_call>"
    reply = r"<response>.*?</response>"
    tails = {
        (True, False): f"{gap}{calls}",
        (False, True): f"{gap}{reply}",
        (True, True): f"{gap}{calls}{gap}{reply}",
        (False, False): "",
    }
    return {key: re.compile(f"{tail}$", re.DOTALL) for key, tail in tails.items()}


def format_score(response: str, ground_truth: str, rules: FormatRules = FormatRules()) -> float:
    """1.0 when `response` has the tag layout the ground truth's tags call for, else 0.0.

    Same verdict as ToolRL's `re.search(r"^<think>.*?</think>TAIL$", response, re.DOTALL)` plus its
    tag counts, but the think text is skipped with `str.find` instead of the regex engine's lazy
    `.*?`, which costs ~0.1 µs a character (tests/toolcall checks the two agree).
    """
    wants_calls, wants_reply = "<tool_call>" in ground_truth, "<response>" in ground_truth
    tags = (["<tool_call>", "</tool_call>"] if wants_calls else []) + (["<response>", "</response>"] if wants_reply else [])
    if any(response.count(tag) != 1 for tag in tags):
        return 0.0
    if not (rules.optional_think_open or response.startswith("<think>")):
        return 0.0
    tail = _format_tails(rules)[wants_calls, wants_reply]
    # `.*?</think>` may end at any `</think>`: try each. The tails start with a tag that occurs once,
    # so at most one try gets past its first characters and the work stays linear.
    end = response.find("</think>")
    while end >= 0:
        if tail.match(response, end + len("</think>")):
            return 1.0
        end = response.find("</think>", end + 1)
    return 0.0


def parse_calls(text: str, max_calls: int | None = ParseCaps.max_calls, strict: bool = True) -> list[ToolCall]:
    """The calls after the first `<tool_call>`, one JSON object with a `name` per line; raises `Unparseable`.

    Cut as ToolRL cuts: at the next `<tool_call>` or the first `</tool_call>`, whichever comes first,
    provided the text has a `</tool_call>` at all. `strict` (ground truths): a string `name` and object
    `parameters` on every call; otherwise foreign names and parameters are kept for `match` to judge.
    """
    start = text.find("<tool_call>")
    if start < 0 or "</tool_call>" not in text:
        raise Unparseable("no <tool_call>…</tool_call> block")
    block = text[start + len("<tool_call>") :].split("<tool_call>", 1)[0].split("</tool_call>", 1)[0]
    lines = block.strip().split("\n")
    if max_calls is not None and len(lines) > max_calls:
        raise Unparseable(f"more than {max_calls} calls")
    return [_parse_call(line, strict) for line in lines]


def _parse_call(line: str, strict: bool) -> ToolCall:
    try:
        call = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise Unparseable(f"invalid JSON: {error}") from None
    # The authors count every call's name (a multiset), so a call needs one, and a hashable one.
    if not isinstance(call, dict) or "name" not in call or isinstance(call["name"], (dict, list)):
        raise Unparseable('a call must be an object with a "name" that is not an array or object')
    name, parameters = call["name"], call.get("parameters")
    if strict and not (isinstance(name, str) and isinstance(parameters, dict)):
        raise Unparseable('a call must be an object with a string "name" and an object "parameters"')
    return ToolCall(name if isinstance(name, str) else None, parameters if isinstance(parameters, dict) else None)


def multiset_jaccard(left: Iterable[Any], right: Iterable[Any]) -> float:
    """|A ∩ B| / |A ∪ B| counting repeats; two empty collections match fully (ToolRL's `match_score`)."""
    a, b = Counter(left), Counter(right)
    if not a and not b:
        return 1.0
    shared = sum((a & b).values())
    return shared / (sum(a.values()) + sum(b.values()) - shared)


def key_jaccard(left: Iterable[str], right: Iterable[str]) -> float:
    """`multiset_jaccard` for the keys of two objects, which cannot repeat: plain sets, much faster."""
    a, b = set(left), set(right)
    if not a and not b:
        return 1.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


def json_equal(left: Any, right: Any) -> bool:
    """Equality of decoded JSON values where booleans equal only booleans (Python has `True == 1`).

    Iterative, so the deepest value `json.loads` accepts cannot overflow the stack here.
    """
    if type(left) is type(right) and type(left) in (str, int, float):
        return left == right  # the common case, without the loop
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if isinstance(a, bool) or isinstance(b, bool):
            if a is not b:
                return False
        elif isinstance(a, dict):
            if not isinstance(b, dict) or a.keys() != b.keys():
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif isinstance(b, (dict, list)) or a != b:
            return False
    return True


def match(truth: Sequence[ToolCall], predicted: Sequence[ToolCall]) -> Matching:
    """ToolRL's matching: name Jaccard, then per ground-truth call the best unused same-name prediction.

    "Best" is the largest parameter-name Jaccard plus count of equal values (first one on ties);
    a candidate scoring 0 is not taken, exactly as in ToolRL. Raises `Unparseable` when a same-name
    candidate has no object `parameters` (the authors fail the whole prediction there).
    """
    s_name = multiset_jaccard((c.name for c in truth), (c.name for c in predicted))
    s_params = s_values = 0.0
    used: set[int] = set()
    for gt in truth:
        best: tuple[float, float, int] | None = None
        for index, candidate in enumerate(predicted):
            if index in used or candidate.name != gt.name:
                continue
            given = candidate.parameters
            if given is None:
                raise Unparseable(f'call {index} to {gt.name!r} has no object "parameters"')
            names = key_jaccard(gt.parameters, given)
            values = sum(1 for key, value in gt.parameters.items() if key in given and json_equal(given[key], value))
            if names + values > (best[0] + best[1] if best else 0.0):
                best = (names, values, index)
        if best:
            used.add(best[2])
            s_params += best[0]
            s_values += best[1]
    return Matching(s_name, s_params, s_values, len(truth), _param_count(truth))


def _param_count(truth: Sequence[ToolCall]) -> int:
    return sum(len(c.parameters or ()) for c in truth)


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


def score(completion: str, ground_truth: str, rules: FormatRules = FormatRules(), caps: ParseCaps = ParseCaps()) -> Score:
    """Score one completion (raw or chat-template-wrapped) against its ground truth.

    Raises `Unparseable` when the ground truth has a `<tool_call>` block that does not parse.
    """
    return score_group([completion], ground_truth, rules, caps)[0]


def score_group(
    completions: Sequence[str], ground_truth: str, rules: FormatRules = FormatRules(), caps: ParseCaps = ParseCaps()
) -> list[Score]:
    """Score completions that share a ground truth (a GRPO group): the ground truth is parsed once."""
    truth = _truth_calls(ground_truth) if "<tool_call>" in ground_truth else None
    return [_score(completion, ground_truth, truth, rules, caps) for completion in completions]


def _score(completion: str, ground_truth: str, truth: Sequence[ToolCall] | None, rules: FormatRules, caps: ParseCaps) -> Score:
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
    """Parsed ground truth, cached across requests when short; callers must not mutate."""
    if len(ground_truth) > CACHED_TRUTH_CHARS:
        return tuple(parse_calls(ground_truth, max_calls=None))
    return _cached_truth_calls(ground_truth)


@lru_cache(maxsize=256)
def _cached_truth_calls(ground_truth: str) -> tuple[ToolCall, ...]:
    return tuple(parse_calls(ground_truth, max_calls=None))


def _unmatched(fmt: float, truth: Sequence[ToolCall] | None, reason: str) -> Score:
    """No usable prediction: every component at its minimum (ToolRL's correctness −3), 0 without ground-truth calls.

    Minimum even for `param_values` of parameterless calls, which a parsed prediction gets vacuously right."""
    if truth is None:
        return Score(fmt, _zero(), None, reason)
    nothing = Matching(0.0, 0.0, 0.0, len(truth), _param_count(truth))
    return Score(fmt, {key: low for key, (low, _) in RANGES.items()}, nothing, reason)
