"""ToolRL's matching of predicted calls against the ground truth's, and its three components' ranges."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .calls import ToolCall, Unparseable


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


def multiset_jaccard(left: Iterable[Any], right: Iterable[Any]) -> float:
    """|A ∩ B| / |A ∪ B| counting repeats. Two empty collections match fully (ToolRL's `match_score`)."""
    a, b = Counter(left), Counter(right)
    if not a and not b:
        return 1.0
    shared = sum((a & b).values())
    return shared / (sum(a.values()) + sum(b.values()) - shared)


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


def pair_score(truth: dict[str, Any], given: dict[str, Any]) -> tuple[float, int]:
    """(parameter-name Jaccard, count of equal values) of one prediction for one ground-truth call. Two empty
    objects match fully. One pass over the smaller object, so a huge prediction costs no more than its
    match."""
    small, large = (truth, given) if len(truth) <= len(given) else (given, truth)
    shared = values = 0
    for key in small:
        if key in large:
            shared += 1
            values += json_equal(given[key], truth[key])
    if not truth and not given:
        return 1.0, 0
    return shared / (len(truth) + len(given) - shared), values


class _Unused:
    """The predicted calls not taken yet, indexed by (name, parameter name); (name, None) for calls without
    parameters. A candidate that shares no parameter name with a ground-truth call (and is not parameterless
    with it) scores 0 and can never be taken, so it is never looked at."""

    def __init__(self, predicted: Sequence[ToolCall]) -> None:
        self._calls = predicted
        self._by_key: dict[tuple[str, str | None], set[int]] = {}
        for index, call in enumerate(predicted):
            for key in self._keys(call):
                self._by_key.setdefault(key, set()).add(index)

    @staticmethod
    def _keys(call: ToolCall) -> list[tuple[str, str | None]]:
        if call.name is None or call.parameters is None:
            return []
        return [(call.name, name) for name in call.parameters] or [(call.name, None)]

    def scoring(self, gt: ToolCall) -> list[int]:
        """The unused candidates that score above 0 for `gt`, in prediction order (first wins ties)."""
        found: set[int] = set()
        for key in self._keys(gt):
            found |= self._by_key.get(key, set())
        return sorted(found)

    def take(self, index: int) -> None:
        for key in self._keys(self._calls[index]):
            self._by_key[key].discard(index)


def _refuse_bare_candidates(truth: Sequence[ToolCall], predicted: Sequence[ToolCall]) -> None:
    """Raise `Unparseable` where ToolRL's loop would first read a same-name candidate without object
    `parameters`: at the first ground-truth call of its name, naming the first such candidate (it is never
    taken before)."""
    bare: dict[str, int] = {}
    for index, call in enumerate(predicted):
        if call.name is not None and call.parameters is None:
            bare.setdefault(call.name, index)
    if bare:
        for gt in truth:
            if gt.name in bare:
                raise Unparseable(f'call {bare[gt.name]} to {gt.name!r} has no object "parameters"')


def match(truth: Sequence[ToolCall], predicted: Sequence[ToolCall]) -> Matching:
    """ToolRL's matching: name Jaccard, then per ground-truth call the best unused same-name prediction.

    "Best" is the largest parameter-name Jaccard plus count of equal values (first one on ties).
    A candidate scoring 0 is not taken, exactly as in ToolRL. Raises `Unparseable` when a same-name
    candidate has no object `parameters` (the authors fail the whole prediction there).

    Only candidates that score above 0 are looked at (`_Unused`), and each ground-truth call that looks at one
    takes one: n ground-truth calls against m predicted ones cost O(n + m²) pairs, not O(n·m).
    """
    s_name = multiset_jaccard((c.name for c in truth), (c.name for c in predicted))
    _refuse_bare_candidates(truth, predicted)
    unused = _Unused(predicted)
    s_params = s_values = 0.0
    for gt in truth:
        best: tuple[float, int, int] | None = None
        for index in unused.scoring(gt):
            names, values = pair_score(gt.parameters or {}, predicted[index].parameters or {})
            if names + values > (best[0] + best[1] if best else 0.0):
                best = (names, values, index)
        if best:
            unused.take(best[2])
            s_params += best[0]
            s_values += best[1]
    return Matching(s_name, s_params, s_values, len(truth), param_count(truth))


def param_count(truth: Sequence[ToolCall]) -> int:
    return sum(len(c.parameters or ()) for c in truth)
