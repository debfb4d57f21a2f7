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
from dataclasses import dataclass

from corrgrpo_sandbox.harness import parse_python

_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)  # null bytes; absurd nesting (parser stack)


_FIELDS: dict[type, tuple[str, ...]] = {}  # per node type, the fields that may hold child nodes ("ctx" never counts)
_UNKNOWN = -1  # a subtree whose shape the table does not hold: nor does any tree above it (its key holds this id)


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")  # type: ignore[attr-defined]
    return names


def _subtree_ids(tree: ast.AST, table: dict[tuple[object, ...], int], grow: bool) -> tuple[Counter[int], int]:
    """The ids (keyed by node type and child ids) of the subtrees whose shape `table` holds, and the number of
    subtrees. `grow` adds every new shape to `table` (the reference); else a new shape is `_UNKNOWN`, and so is every
    tree above it, with no lookup (a candidate, against the shared read-only table). The service's hot loop."""
    known: list[int] = []
    count = 0

    def visit(node: ast.AST) -> int:
        nonlocal count
        count += 1
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
        if _UNKNOWN in key:
            return _UNKNOWN
        shape = tuple(key)
        node_id = table.get(shape)
        if node_id is None:
            if not grow:
                return _UNKNOWN
            node_id = table[shape] = len(table)
        known.append(node_id)
        return node_id

    visit(tree)
    return Counter(known), count


def _parse(source: str) -> ast.AST | None:
    try:
        return parse_python(source)
    except _UNPARSABLE:
        return None


@dataclass(frozen=True)
class ReferenceTree:
    """The reference's subtree ids, computed once per problem (a big inline reference is parsed once, not per item)."""

    table: dict[tuple[object, ...], int]
    ids: Counter[int] | None  # None: the reference does not parse
    size: int = 0  # its number of subtrees

    @classmethod
    def of(cls, reference: str) -> ReferenceTree:
        table: dict[tuple[object, ...], int] = {}
        tree = _parse(reference)
        try:
            return cls(table, *_subtree_ids(tree, table, grow=True)) if tree is not None else cls({}, None)
        except RecursionError:
            return cls({}, None)

    def similarity(self, candidate: ast.AST) -> float:
        """Similarity of a candidate's syntax tree (parsed once by the caller, who needs it for the syntax check too)."""
        if self.ids is None:
            return 0.0
        try:
            ids, size = _subtree_ids(candidate, self.table, grow=False)
        except RecursionError:  # nested deeper than Python's stack, though the parser took it
            return 0.0
        reference = self.ids
        common = sum(min(count, reference[node_id]) for node_id, count in ids.items())
        union = size + self.size - common
        return common / union if union else 1.0


def ast_similarity(candidate: str, reference: str) -> float:
    tree = _parse(candidate)
    return ReferenceTree.of(reference).similarity(tree) if tree is not None else 0.0
