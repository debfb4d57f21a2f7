"""Code extraction from a model response, and the `format` component.

A fenced block is a line starting with three backticks and a language tag in `FENCE_LANGUAGES`
(case-insensitive), up to the next line of three backticks. Which block is the code is a choice:
`last` (default: models often draft, then give the final answer), `first`, or `only` (code only
when there is exactly one block). `format` is 1 iff the response has exactly one such block.
"""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["last", "first", "only"]
FENCE_LANGUAGES = ("python", "py", "python3")
_BLOCK = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(response: str, languages: tuple[str, ...] = FENCE_LANGUAGES) -> list[str]:
    """The bodies of the fenced Python blocks, in order."""
    return [m.group(2) for m in _BLOCK.finditer(response) if m.group(1).lower() in languages]


def extract_code(response: str, mode: ExtractMode = "last", languages: tuple[str, ...] = FENCE_LANGUAGES) -> str | None:
    """The code to score, or None when the response has none under `mode`."""
    blocks = python_blocks(response, languages)
    if not blocks or (mode == "only" and len(blocks) != 1):
        return None
    return blocks[0] if mode == "first" else blocks[-1]


def format_score(response: str, languages: tuple[str, ...] = FENCE_LANGUAGES) -> float:
    return 1.0 if len(python_blocks(response, languages)) == 1 else 0.0
