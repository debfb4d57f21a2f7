"""`ast_similarity`: multiset Jaccard of structural subtrees, identifiers and literal values abstracted.

Every node is labelled by its type only (names, attributes, argument names and constant values
are dropped; the load/store context is ignored), and every subtree gets an exact id by interning
(label, child ids): two subtrees share an id iff they have the same shape. The score is
|A ∩ B| / |A ∪ B| over the two multisets of subtree ids: 1 for a renamed copy, deterministic (no
hashing), linear in the size of the trees. Both trees are parsed on their own, so a syntax error
on either side gives 0.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field

_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)  # null bytes; absurd nesting (parser stack)


@dataclass
class _Interner:
    """Subtree ids: the reference's table is shared read-only; a candidate's new shapes go to its own overlay."""

    base: dict[tuple[object, ...], int] = field(default_factory=dict)
    overlay: dict[tuple[object, ...], int] = field(default_factory=dict)

    def id(self, key: tuple[object, ...]) -> int:
        found = self.base.get(key)
        if found is None:
            found = self.overlay.setdefault(key, len(self.base) + len(self.overlay))
        return found


def _subtree_ids(tree: ast.AST, interner: _Interner) -> Counter[int]:
    ids: Counter[int] = Counter()

    def visit(node: ast.AST) -> int:
        children = tuple(visit(child) for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr_context))
        node_id = interner.id((type(node).__name__, children))
        ids[node_id] += 1
        return node_id

    visit(tree)
    return ids


@dataclass(frozen=True)
class ReferenceTree:
    """The reference's subtree ids, computed once per problem (a big inline reference is parsed once, not per item)."""

    table: dict[tuple[object, ...], int]
    ids: Counter[int] | None  # None: the reference does not parse

    @classmethod
    def of(cls, reference: str) -> ReferenceTree:
        interner = _Interner()
        try:
            ids = _subtree_ids(ast.parse(reference), interner)
        except _UNPARSABLE:
            return cls({}, None)
        return cls(interner.overlay, ids)

    def similarity(self, candidate: str) -> float:
        if self.ids is None:
            return 0.0
        try:
            a = _subtree_ids(ast.parse(candidate), _Interner(self.table))
        except _UNPARSABLE:
            return 0.0
        union = sum((a | self.ids).values())
        return sum((a & self.ids).values()) / union if union else 1.0


def ast_similarity(candidate: str, reference: str) -> float:
    return ReferenceTree.of(reference).similarity(candidate)
