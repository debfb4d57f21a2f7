"""The tracked Markdown stays short enough to read: at most 1,100 lines in all, none over 120 characters."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES, MAX_WIDTH = 1100, 120


def tracked_markdown() -> dict[str, list[str]]:
    names = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return {name: (REPO / name).read_text().splitlines() for name in names.split() if (REPO / name).exists()}


def test_the_markdown_fits_in_1100_lines() -> None:
    counts = {name: len(lines) for name, lines in tracked_markdown().items()}
    assert counts, "git ls-files found no Markdown"
    assert sum(counts.values()) <= MAX_LINES, (
        f"{sum(counts.values())} lines of Markdown > {MAX_LINES}: {counts}"
    )


def test_no_markdown_line_is_wider_than_120_characters() -> None:
    wide = [
        f"{name}:{number}: {len(line)} chars"
        for name, lines in tracked_markdown().items()
        for number, line in enumerate(lines, 1)
        if len(line) > MAX_WIDTH
    ]
    assert wide == []
