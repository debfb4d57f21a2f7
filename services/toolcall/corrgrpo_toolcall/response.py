"""The assistant's reply inside a completion, and its tag layout: the `format` component."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# (start of the assistant turn, end of a turn) for the chat templates we unwrap.
TURN_MARKERS = (
    ("<|im_start|>assistant", "<|im_end|>"),  # Qwen / ChatML
    ("<|start_header_id|>assistant<|end_header_id|>", "<|eot_id|>"),  # Llama 3
)


@dataclass(frozen=True)
class FormatRules:
    """CorrGRPO's format pattern by default: any whitespace between the tag blocks (ToolRL's wants one
    newline).

    The fork accepts a response without the opening `<think>` when the model's name contains "think"
    (the template of a thinking model opens it). We cannot see the model, so that is a setting.
    """

    lenient_separators: bool = True  # `\s*` instead of exactly `\n` between the tag blocks
    optional_think_open: bool = False  # thinking models whose template already opened `<think>`


# End-of-sequence and end-of-turn tokens of common tokenizers. A completion decoded with special tokens
# kept (OpenRLHF does) ends in one or several (end of turn, then EOS or padding). They never change a score.
END_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
    "<end_of_turn>", "<eos>", "<｜end▁of▁sentence｜>",
)  # fmt: skip


def strip_end_tokens(text: str) -> str:
    """`text` without the end tokens (and whitespace) it ends with. Linear in their length."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        token = next((t for t in END_TOKENS if end >= len(t) and text.startswith(t, end - len(t))), None)
        if token is None:
            return text[:end]
        end -= len(token)


def extract_response(text: str) -> str:
    """The assistant's reply: text after the last assistant-turn marker, before the end-of-turn marker.

    Raw completions pass through (stripped of trailing end tokens), as in ToolRL, which also cuts at
    `<|im_end|>`.
    """
    text = strip_end_tokens(text)
    for start, end in TURN_MARKERS:
        if start in text:
            text = text.rsplit(start, 1)[1]
        if end in text:
            text = text.split(end, 1)[0]
    return text.strip()


@lru_cache(maxsize=8)
def _format_tails(rules: FormatRules) -> dict[tuple[bool, bool], re.Pattern[str]]:
    """What must follow `</think>` in ToolRL's patterns, keyed by (ground truth has `<tool_call>`, has
    `<response>`)."""
    gap = r"\s*" if rules.lenient_separators else r"\n"
    calls = r"<tool_call>\n.*?\n</tool_call>"
    reply = r"<response>.*?</response>"
    tails = {
        (True, False): f"{gap}{calls}",
        (False, True): f"{gap}{reply}",
        (True, True): f"{gap}{calls}{gap}{reply}",
        (False, False): "",
    }
    return {key: re.compile(f"{tail}$", re.DOTALL) for key, tail in tails.items()}


def format_score(response: str, ground_truth: str, rules: FormatRules = FormatRules()) -> float:
    """1.0 when `response` has the tag layout the ground truth's tags call for, else 0.0.

    Same verdict as ToolRL's `re.search(r"^<think>.*?</think>TAIL$", response, re.DOTALL)` plus its
    tag counts, but the think text is skipped with `str.find` instead of the regex engine's lazy
    `.*?`, which costs ~0.1 µs a character (tests/toolcall checks the two agree).
    """
    wants_calls, wants_reply = "<tool_call>" in ground_truth, "<response>" in ground_truth
    tags = (["<tool_call>", "</tool_call>"] if wants_calls else []) + (
        ["<response>", "</response>"] if wants_reply else []
    )
    if any(response.count(tag) != 1 for tag in tags):
        return 0.0
    if not (rules.optional_think_open or response.startswith("<think>")):
        return 0.0
    tail = _format_tails(rules)[wants_calls, wants_reply]
    # `.*?</think>` may end at any `</think>`: try each. The tails start with a tag that occurs once,
    # so at most one try gets past its first characters and the work stays linear.
    end = response.find("</think>")
    while end >= 0:
        if tail.match(response, end + len("</think>")):
            return 1.0
        end = response.find("</think>", end + 1)
    return 0.0
