"""Settings of the tool-call service (`CORRGRPO_TOOLCALL_*`, on top of the kit's `CORRGRPO_*`).

Defaults live once, in the scoring dataclasses. The scorer's config is built from these settings.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from corrgrpo_common import ServiceSettings

from .calls import ParseCaps
from .response import FormatRules


class ToolCallSettings(ServiceSettings):
    toolcall_max_completion_chars: int = Field(
        ParseCaps.max_chars, gt=0, description="Longer completions score as unparseable"
    )
    toolcall_max_ground_truth_chars: int = Field(
        32_768, gt=0, description="A longer `ground_truth` gets 413 (RLLA-4K's longest: 2,339)"
    )
    toolcall_max_calls: int = Field(
        ParseCaps.max_calls, gt=0, description="A `<tool_call>` block with more lines scores as unparseable"
    )
    toolcall_lenient_separators: bool = Field(
        FormatRules.lenient_separators,
        description="format: any whitespace between tag blocks (CorrGRPO's pattern); `false`: exactly one "
        "newline "
        "(ToolRL's original)",
    )
    toolcall_optional_think_open: bool = Field(
        FormatRules.optional_think_open,
        description="format: accept a response that starts inside `<think>`, as the authors do for thinking "
        "models "
        "(whose template opens it, e.g. Qwen3-4B-Thinking-2507)",
    )
    toolcall_data_dir: Path | None = Field(
        None,
        description="Folder with `rlla_4k/test.parquet` and `api_bank/level-N-api_processed.json`, read by "
        "`python -m corrgrpo_devtools.match_metrics` when no `--source` is given; unset: `--source` is "
        "required",
    )

    def format_rules(self) -> FormatRules:
        return FormatRules(self.toolcall_lenient_separators, self.toolcall_optional_think_open)

    def parse_caps(self) -> ParseCaps:
        return ParseCaps(self.toolcall_max_completion_chars, self.toolcall_max_calls)
