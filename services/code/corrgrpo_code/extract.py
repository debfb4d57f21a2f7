"""Code extraction from a model response, and the `format` component. One pass over the lines: linear.

A fenced block opens at a line starting with three backticks (after optional spaces) and an
optional language tag, and closes at the next line starting with three backticks that is not
itself a bare opening fence (` ```python `): so a closing fence followed by other text on its line
(an EOS token kept by the decoder, ` ```<|im_end|> `, ` ```</s> `) still closes the block. A block is
Python when its tag is in `FENCE_LANGUAGES` (case-insensitive). Which block is the code is a
choice: `last` (default: models often draft, then give the final answer), `first`, or `only`
(code only when there is exactly one block). `format` is 1 iff the response has exactly one block.
"""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["last", "first", "only"]
FENCE_LANGUAGES = ("python", "py", "python3")
_FENCE = "```"
_TAG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_BARE_TAG = re.compile(r"[ \t]*[A-Za-z0-9_+-]+[ \t\r]*")


def _fenced_blocks(response: str) -> list[tuple[str, str]]:
    """(lowercased tag, body) of every closed fenced block, in order."""
    blocks: list[tuple[str, str]] = []
    tag, body = "", None
    for line in response.split("\n"):
        stripped = line.lstrip(" \t")
        fence = stripped.startswith(_FENCE)
        if body is None:
            if fence:
                tag, body = _TAG.match(stripped, len(_FENCE)).group(1).lower(), []  # type: ignore[union-attr]
        elif fence and not _BARE_TAG.fullmatch(stripped, len(_FENCE)):
            blocks.append((tag, "".join(f"{part}\n" for part in body)))
            body = None
        else:
            body.append(line)
    return blocks


def python_blocks(response: str, languages: tuple[str, ...] = FENCE_LANGUAGES) -> list[str]:
    """The bodies of the fenced Python blocks, in order."""
    return [body for tag, body in _fenced_blocks(response) if tag in languages]


def pick_block(blocks: list[str], mode: ExtractMode = "last") -> str | None:
    """The block to score among a response's Python blocks, or None when there is none under `mode`."""
    if not blocks or (mode == "only" and len(blocks) != 1):
        return None
    return blocks[0] if mode == "first" else blocks[-1]


def format_of(blocks: list[str]) -> float:
    return 1.0 if len(blocks) == 1 else 0.0


def extract_code(response: str, mode: ExtractMode = "last", languages: tuple[str, ...] = FENCE_LANGUAGES) -> str | None:
    """The code to score, or None when the response has none under `mode`."""
    return pick_block(python_blocks(response, languages), mode)


def format_score(response: str, languages: tuple[str, ...] = FENCE_LANGUAGES) -> float:
    return format_of(python_blocks(response, languages))
