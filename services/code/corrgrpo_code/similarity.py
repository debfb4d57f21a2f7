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


def _subtree_ids(tree: ast.AST, interned: dict[tuple[object, ...], int]) -> Counter[int]:
    ids: Counter[int] = Counter()

    def visit(node: ast.AST) -> int:
        children = tuple(visit(child) for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr_context))
        key = (type(node).__name__, children)
        node_id = interned.setdefault(key, len(interned))
        ids[node_id] += 1
        return node_id

    visit(tree)
    return ids


def ast_similarity(candidate: str, reference: str) -> float:
    interned: dict[tuple[object, ...], int] = {}
    try:
        a, b = _subtree_ids(ast.parse(candidate), interned), _subtree_ids(ast.parse(reference), interned)
    except (SyntaxError, ValueError, RecursionError):  # ValueError: null bytes; RecursionError: absurd nesting
        return 0.0
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 1.0
