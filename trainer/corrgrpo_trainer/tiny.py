"""A tiny Qwen2-style policy built locally (no hub): for CPU runs, tests and `make demo`.

The tokenizer is a byte-level BPE trained on a handful of strings, so any text round-trips
(unknown words fall back to bytes). It carries a ChatML chat template like Qwen's, so TRL's
conversational path works unchanged. The model is randomly initialised (~32k parameters).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .models import TINY_CONTEXT, quiet

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


# ChatML as Qwen2.5 uses it, without the tool-calling branches (TRL only needs messages and the generation
# prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A few strings in the shapes the domains produce. Enough for a few hundred merges.
TRAINING_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "```python\nclass Solution:\n    def twoSum(self, nums: list[int], target: int) -> list[int]:\n        "
    "pass\n```",
    '<think>call the tool</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": '
    '"Paris"}}\n</tool_call>',
    "<response>The meeting is at 10 am.</response>",
    "Write a Python function that returns the sum of a list of numbers.",
    "You are a helpful assistant. Answer the user's question.",
]


def build_tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on TRAINING_TEXT, wrapped with ChatML template, pad = eos = <|endoftext|>."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=TINY_CONTEXT,
    )


def build_tiny_policy(path: str | Path, seed: int = 0) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """Build the tiny policy, save model and tokenizer under `path` (from_pretrained(path) works) and return
    both."""
    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=TINY_CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    Path(path).mkdir(parents=True, exist_ok=True)
    with quiet():  # no "Writing model shards" bar
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    # as from_pretrained(path) would: TRL loads its KL reference model from it
    model.config._name_or_path = str(path)
    return model, tokenizer
