"""Shipped trainer configs shrunk to a short CPU run, for tests that run the trainer end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"
CPU_TRL = {
    "max_completion_length": 4,
    "gradient_accumulation_steps": 1,  # a step is the `batch` rollouts
    "gradient_checkpointing": False,
    "use_cpu": True,
    "report_to": "none",
}


def cpu_config(
    name: str, output_dir: Path, batch: int, generations: int, folder: Path = CONFIGS, **trl: Any
) -> dict[str, Any]:
    """Config `name` of `folder` without warm-up or evaluation, `batch` rollouts a step in groups of
    `generations`; `trl`: TRL fields set over CPU_TRL's."""
    config = yaml.safe_load((folder / name).read_text())
    config |= {"warmup": None, "evaluation": None}
    config["trl"] |= {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": batch,
        "num_generations": generations,
        **CPU_TRL,
        **trl,
    }
    return config
