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


_FIELDS: dict[type, tuple[str, ...]] = {}  # per node type, the fields that may hold child nodes ("ctx" never counts)


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")  # type: ignore[attr-defined]
    return names


def _subtree_ids(tree: ast.AST, interner: _Interner) -> Counter[int]:
    """Every subtree's id, keyed by (node type, child ids); the hot loop of the service, hence the locals."""
    base, overlay, ids = interner.base, interner.overlay, []

    def visit(node: ast.AST) -> int:
        kind = type(node)
        key: list[object] = [kind]
        for name in _FIELDS.get(kind) or _fields(kind):
            value = getattr(node, name, None)
            if type(value) is list:
                for child in value:
                    if isinstance(child, ast.AST):
                        key.append(visit(child))
            elif isinstance(value, ast.AST):
                key.append(visit(value))
        shape = tuple(key)
        node_id = base.get(shape)
        if node_id is None:
            node_id = overlay.setdefault(shape, len(base) + len(overlay))
        ids.append(node_id)
        return node_id

    visit(tree)
    return Counter(ids)


def _parse(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except _UNPARSABLE:
        return None


@dataclass(frozen=True)
class ReferenceTree:
    """The reference's subtree ids, computed once per problem (a big inline reference is parsed once, not per item)."""

    table: dict[tuple[object, ...], int]
    ids: Counter[int] | None  # None: the reference does not parse

    @classmethod
    def of(cls, reference: str) -> ReferenceTree:
        interner = _Interner()
        tree = _parse(reference)
        try:
            return cls(interner.overlay, _subtree_ids(tree, interner)) if tree is not None else cls({}, None)
        except RecursionError:
            return cls({}, None)

    def similarity(self, candidate: ast.AST) -> float:
        """Similarity of a candidate's syntax tree (parsed once by the caller, who needs it for the syntax check too)."""
        if self.ids is None:
            return 0.0
        try:
            a = _subtree_ids(candidate, _Interner(self.table))
        except RecursionError:  # nested deeper than Python's stack, though the parser took it
            return 0.0
        reference = self.ids
        common = sum(min(count, reference[node_id]) for node_id, count in a.items() if node_id in reference)
        union = a.total() + reference.total() - common
        return common / union if union else 1.0


def ast_similarity(candidate: str, reference: str) -> float:
    tree = _parse(candidate)
    return ReferenceTree.of(reference).similarity(tree) if tree is not None else 0.0
