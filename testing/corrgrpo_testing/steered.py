"""The steered tiny policy of the AgentDojo training test (tests/trainer/test_agentdojo_env.py) and its bench
(bench/bench_agentdojo_train.py): generation steered by `sequence_bias` (a real transformers option) to call
`read_file` first and answer after the tool result, so every rollout makes a tool call. Needs the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from corrgrpo_trainer.agentdojo.tools import tool_calling_template
from corrgrpo_trainer.tiny import build_tiny_policy

from .servers import ServiceProcess

CONFIG = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "agentdojo.yaml"
PAIR = {"suites": ["banking"], "user_tasks": ["user_task_0"], "injection_tasks": ["injection_task_0"]}
READ_BILL = (
    '<tool_call>\n{"name": "read_file", "arguments": {"file_path": "bill-december-2023.txt"}}\n</tool_call>'
)
ANSWER = "I read the bill."


def steered_bias(
    tokenizer: Any, prompt_tail: list[int], tool_tail: list[int]
) -> dict[tuple[int, ...], float]:
    """`sequence_bias` that makes generation right after `prompt_tail` emit READ_BILL and, right after a tool
    response (`tool_tail`, more specific, so a larger bias), emit ANSWER; each then ends with EOS."""
    bias: dict[tuple[int, ...], float] = {}
    for tail, text, weight in ((prompt_tail, READ_BILL, 100.0), (tool_tail, ANSWER, 200.0)):
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        for end in range(1, len(ids) + 1):
            bias[tuple(tail + ids[:end])] = weight
    return bias


def steered_policy(directory: Path) -> tuple[str, dict[tuple[int, ...], float]]:
    """The tiny policy saved with room for AgentDojo's long prompts, and the bias that steers it."""
    model, tokenizer = build_tiny_policy(directory / "build")
    model.config.max_position_embeddings = 16384  # RoPE has no table; TRL drops tool results past this length
    tool_calling_template(tokenizer)
    model.save_pretrained(directory / "policy")
    tokenizer.save_pretrained(directory / "policy")
    user = [{"role": "user", "content": "x"}]
    prompt = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=True, return_dict=False)
    call = {"type": "function", "function": {"name": "read_file", "arguments": {"file_path": "x"}}}
    after_tool = [
        *user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "read_file", "content": "y"},
    ]
    tool = tokenizer.apply_chat_template(
        after_tool, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    # "<|im_start|>assistant\n"
    common = next(n for n in range(1, len(prompt)) if prompt[-n:] != tool[-n:]) - 1
    return str(directory / "policy"), steered_bias(tokenizer, prompt[-common:], tool[-common - 4 :])


def agentdojo_config(service: ServiceProcess, output_dir: Path, model: str, **trl: Any) -> dict[str, Any]:
    config = yaml.safe_load(CONFIG.read_text())
    config["model"] = model
    config["dataset"] = PAIR
    config["services"]["agentdojo"]["url"] = service.url
    config["trl"] |= {
        "output_dir": str(output_dir),
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "num_generations": 2,
    }
    # no use_cpu: the commands must run the shipped config
    config["trl"] |= {"gradient_checkpointing": False, **trl}
    # The steering's sequence_bias has tuple keys, which TensorBoard's record of the arguments (JSON) cannot
    # hold.
    config["trl"]["report_to"] = "none"
    return config
