"""`ast_similarity`, the authors' definition: difflib's `SequenceMatcher(autojunk=False).ratio()` of the two
modules' structure sequences, clipped to [0, 1].

A module's sequence is its pre-order walk (`ast.iter_child_nodes` order) writing each node's type name on the
way in and `/<name>` on the way out. Identifiers and literal values are fields, not nodes, so a renamed copy
scores 1 (the context nodes `Load`/`Store` and operators such as `Add` are nodes: they count). ratio = 2·M /
(len(candidate) + len(reference)), M the total size of the matching blocks SequenceMatcher finds.

SequenceMatcher is worse than quadratic on repetitive sequences (each matching block re-scans the rest of the
other side: 2,000 tokens against 2,000 took 315 s), so `matched` is the same block search with the reference's
positions found by bisection and a budget on the pairs it examines: past `MATCH_BUDGET` the pair is not
compared and scores 0. Real pairs stay below it (LeetCodeDataset's 30 largest references against each other:
1.27 M at most). A pair that cannot reach the budget (`reachable_pairs`) is compared by cydifflib's
`SequenceMatcher`, difflib's algorithm in C, about 9 times faster than `search` (identical ratios:
tests/code/test_parity.py). Each reference keeps the ratios of the last `MEMO_SIZE` distinct candidate
structures it met: a group's copies are compared once.
"""

from __future__ import annotations

import ast
import hashlib
from bisect import bisect_left
from dataclasses import dataclass, field

from cydifflib import SequenceMatcher

from corrgrpo_code.cache import BoundedMemo
from corrgrpo_code.extract import parse_python, pick_code, split_fences

MATCH_BUDGET = 3_000_000  # (i, j) pairs one comparison examines: ~1 s of Python on a loaded core
MEMO_SIZE = 64  # distinct candidate structures whose ratio a reference keeps
# null bytes. Nesting past the parser's stack
_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
_CLOSING: dict[str, str] = {}


class TooManyPairs(Exception):
    """The comparison would examine more than its budget of pairs."""


def structure(tree: ast.AST) -> list[str]:
    """The node-type names in pre-order, each subtree closed by `/<name>` (iterative: any depth the parser
    took). Children in `ast.iter_child_nodes` order, read from `_fields` directly: its two generators per node
    were 40% of the walk."""
    tokens: list[str] = []
    stack: list[ast.AST | str] = [tree]
    append, pop, push = tokens.append, stack.pop, stack.append
    while stack:
        node = pop()
        if type(node) is str:  # a subtree's closing tag, due once its children are written
            append(node)
            continue
        name = type(node).__name__
        append(name)
        push(_CLOSING.get(name) or _CLOSING.setdefault(name, f"/{name}"))
        children: list[ast.AST] = []
        for attribute in node._fields:
            value = getattr(node, attribute, None)
            if isinstance(value, ast.AST):
                children.append(value)
            elif isinstance(value, list):
                children += [item for item in value if isinstance(item, ast.AST)]
        children.reverse()
        stack += children
    return tokens


def _parse(source: str) -> ast.AST | None:
    try:
        return parse_python(source)
    except _UNPARSABLE:
        return None


def _positions(b: list[str]) -> dict[str, list[int]]:
    where: dict[str, list[int]] = {}
    for j, token in enumerate(b):
        where.setdefault(token, []).append(j)
    return where


def matched(a: list[str], b: list[str], where: dict[str, list[int]], budget: int = MATCH_BUDGET) -> int:
    """Total size of the matching blocks `SequenceMatcher(None, a, b, autojunk=False)` finds (`where`: `b`'s
    positions per token). Same recursion: the longest block of a region (earliest in `a`, then in `b`), then
    the regions before and after it. Raises TooManyPairs past `budget` examined pairs.

    Equal sequences (a copy of the reference's structure, renamed or not) are one block, the whole of both:
    the result and the budget's verdict come without the search, whose first and only region would examine
    every position of each of `a`'s tokens in `b`, plus one per token of `a`."""
    if a == b:
        if first_region_pairs(a, where) > budget:
            raise TooManyPairs(f"over {budget} pairs")
        return len(a)
    if reachable_pairs(a, b, where) <= budget:
        return sum(block.size for block in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return search(a, b, where, budget)


def reachable_pairs(a: list[str], b: list[str], where: dict[str, list[int]]) -> int:
    """An upper bound of the pairs `search` examines: the regions of one depth of its recursion are disjoint
    in `a` and in `b`, so together they examine at most what the first region does (each of `a`'s positions
    once, and its token's positions in `b`). Each depth's regions are shorter by at least one, so there are at
    most min(|a|, |b|)."""
    return first_region_pairs(a, where) * min(len(a), len(b))


def first_region_pairs(a: list[str], where: dict[str, list[int]]) -> int:
    """The pairs the search's first region (all of `a` against all of `b`) examines: each of `a`'s positions,
    and each position of its token in `b`."""
    return sum(len(where.get(token, ())) for token in a) + len(a)


def search(a: list[str], b: list[str], where: dict[str, list[int]], budget: int) -> int:
    """`matched` by the block search itself."""
    total, spent = 0, 0
    regions = [(0, len(a), 0, len(b))]
    while regions:
        alo, ahi, blo, bhi = regions.pop()
        best_i, best_j, best = alo, blo, 0
        run: dict[int, int] = {}  # j -> length of the common run ending at (i - 1, j)
        for i in range(alo, ahi):
            spots = where.get(a[i], ())
            grown: dict[int, int] = {}
            for j in spots[bisect_left(spots, blo) :]:  # type: ignore[call-overload]
                if j >= bhi:
                    break
                spent += 1
                k = grown[j] = run.get(j - 1, 0) + 1
                if k > best:
                    best_i, best_j, best = i - k + 1, j - k + 1, k
            run = grown
            spent += 1
            if spent > budget:
                raise TooManyPairs(f"over {budget} pairs")
        if best:
            total += best
            if alo < best_i and blo < best_j:
                regions.append((alo, best_i, blo, best_j))
            if best_i + best < ahi and best_j + best < bhi:
                regions.append((best_i + best, ahi, best_j + best, bhi))
    return total


@dataclass(frozen=True)
class Reference:
    """A problem's reference as the comparison needs it, prepared once per problem: its structure (None when
    it has no code or does not parse: the component is then unavailable, 0) and the positions of each of its
    tokens."""

    code: str  # what the reference's timing runs execute
    tokens: list[str] | None
    where: dict[str, list[int]] = field(default_factory=dict)
    # a candidate structure's digest and the budget -> its ratio, or why it went over the budget
    memo: BoundedMemo[tuple[bytes, int], float | str] = field(
        default_factory=lambda: BoundedMemo(MEMO_SIZE), compare=False, repr=False
    )

    @classmethod
    def of(cls, reference: str, marker: str) -> Reference:
        """A reference with a fenced block is reduced to its code as a response is (`extract.pick_code`); a
        plain one is taken whole, stripped."""
        text = reference.strip()
        blocks = split_fences(text)
        code = pick_code(blocks, marker) if blocks else text
        tree = _parse(code) if code else None
        tokens = structure(tree) if tree is not None else None
        return cls(code, tokens, _positions(tokens) if tokens else {})

    @property
    def available(self) -> bool:
        return bool(self.tokens)

    def similarity(self, candidate: ast.AST | None, budget: int = MATCH_BUDGET) -> float:
        """The ratio for a candidate's syntax tree (None: no code, or it does not parse: 0), once per distinct
        structure while the memo keeps it. Raises TooManyPairs."""
        if not self.tokens or candidate is None:
            return 0.0
        tokens = structure(candidate)
        digest = hashlib.blake2b("\0".join(tokens).encode(), digest_size=16).digest()
        ratio = self.memo.get((digest, budget), lambda: self._ratio(tokens, budget))
        if isinstance(ratio, str):
            raise TooManyPairs(ratio)
        return ratio

    def _ratio(self, tokens: list[str], budget: int) -> float | str:
        assert self.tokens
        try:
            ratio = 2 * matched(tokens, self.tokens, self.where, budget) / (len(tokens) + len(self.tokens))
        except TooManyPairs as error:
            return str(error)
        return min(1.0, max(0.0, ratio))


def ast_similarity(candidate: str, reference: str, marker: str = "class Solution") -> float:
    """The component for two sources (the scorer prepares the reference once per problem instead); 0 past the
    budget."""
    try:
        return Reference.of(reference, marker).similarity(_parse(candidate) if candidate.strip() else None)
    except TooManyPairs:
        return 0.0
