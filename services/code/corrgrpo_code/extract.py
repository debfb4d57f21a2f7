"""Code extraction from a model response (the authors' rule, with `format`), and its parse in the service.

A fenced block is the text between two occurrences of three backticks, paired from the start of the (stripped)
response (first with second, third with fourth; an unpaired last one is ignored), anywhere on a line. Its body
loses a leading `python` or `py` tag (any case), then spaces and tabs, then one newline. Any block counts: an
untagged one, or one tagged otherwise (whose tag then stays in the body, which rarely parses).

The code is the block that contains the problem's *marker*, the longest such (the longest of all when none
does; the first on ties), stripped: a response that quotes the starter code, then gives the implementation, is
scored on the implementation. The marker is `class Solution` for a LeetCode entry point (`Solution().twoSum`:
the authors' rule) and `def name(` for a function entry point (HumanEval's `has_close_elements`: ours).
Without a block, the code is the response after its last `</think>`, from the marker's first occurrence on.
`format` is 1 iff the response has a block and the code contains the marker.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass
from typing import Literal

_PARSING = threading.RLock()  # re-entrant: a finalizer run by a collection inside a parse may parse too
_FENCE = "```"
_TAG = re.compile(r"(?:python|py)?[ \t]*\n?", re.IGNORECASE)
_ENTRY = re.compile(r"\s*([A-Za-z_]\w*)\s*(\()?")


def split_fences(text: str) -> list[str]:
    """The raw bodies of the fenced blocks of `text`, in order (linear: one scan for each fence)."""
    blocks: list[str] = []
    start = text.find(_FENCE)
    while start >= 0:
        body = _TAG.match(text, start + len(_FENCE)).end()  # type: ignore[union-attr]  # always matches (all optional)
        end = text.find(_FENCE, body)
        if end < 0:
            break
        blocks.append(text[body:end])
        start = text.find(_FENCE, end + len(_FENCE))
    return blocks


def marker_of(entry_point: str) -> str:
    """What the code must contain: `class X` when the entry point instantiates X (`X().f`), else `def f(`."""
    found = _ENTRY.match(entry_point)
    if found is None:
        return entry_point.strip()
    name, call = found.groups()
    return f"class {name}" if call else f"def {name}("


def pick_code(blocks: list[str], marker: str) -> str:
    """The block with the marker, longest first (raw length, as the authors compare it), stripped."""
    return max(blocks, key=lambda block: (marker in block, len(block))).strip()


@dataclass(frozen=True)
class Extracted:
    code: str  # "" when there is none
    fenced: bool  # the response has a fenced block
    format: float


def extract(response: str, marker: str) -> Extracted:
    text = response.strip()
    blocks = split_fences(text)
    if blocks:
        code = pick_code(blocks, marker)
    else:
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[-1].strip()
        start = text.find(marker)
        code = text[start:] if start >= 0 else text
    return Extracted(code, bool(blocks), float(bool(blocks) and marker in code))


def parse_python(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.AST:
    """`ast.parse`, one thread at a time. CPython before 3.11.8 (Debian 12 ships 3.11.2) keeps the AST
    constructor's recursion depth per interpreter, so a collection during one thread's parse that lets another
    thread parse fails with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905).
    Parsing holds the GIL anyway: the lock costs no parallelism. Every parse in the code service goes through
    here."""
    with _PARSING:
        return ast.parse(source, mode=mode)


def parse_solution(solution: str) -> ast.Module | str:
    """The solution's syntax tree, or why it cannot be compiled. Absurd nesting is the solution's failure,
    never a crash."""
    if not solution.strip():
        return "no code"
    try:
        return parse_python(solution)  # type: ignore[return-value]
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes
        return f"{type(error).__name__}: {error}"
    except (RecursionError, MemoryError) as error:  # the parser's own stack: deeply nested expressions
        return f"{type(error).__name__}: nested too deeply to compile"


def syntax_error(solution: str) -> str | None:
    """Why `solution` cannot be compiled, or None."""
    tree = parse_solution(solution)
    return tree if isinstance(tree, str) else None
