"""The policy of a run: the config's `model` loaded (models.py resolves names; tiny.py builds the test
policy).

Every command that runs a policy (train, sft, eval, rollout) loads it here, so they agree on the dtype, the
default and the CPU threads.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from .models import TINY, load_pretrained


def load_policy(model: str, output_dir: str, threads: int | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): "tiny" builds the local tiny policy. Anything else is resolved by
    models.load_pretrained (the embedded default, a local checkpoint or a hub id; bf16 on GPU). On CPU torch
    runs `threads` threads (None: torch's default)."""
    if threads and not torch.cuda.is_available():
        torch.set_num_threads(threads)
    if model == TINY:
        from .tiny import build_tiny_policy

        return build_tiny_policy(Path(output_dir) / "tiny-policy")
    return load_pretrained(model, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)


def device_args(name: str) -> dict[str, bool]:
    """TRL settings for this machine, under the config's own: bf16 on GPU except for the tiny test policy
    (TRL's bf16 default fails on a CPU), pinned loader memory only where there is a GPU to copy to."""
    gpu = torch.cuda.is_available()
    return {"bf16": gpu and name != TINY, "dataloader_pin_memory": gpu}


def starting_weights(name: str, model: Any) -> dict[str, Any]:
    """What a run starts from, for run.json: the config's `model`, the checkpoint it loaded and the SHA-256 of
    the weights as loaded (parameter names and bytes, in name order), which tells two runs' starts apart or
    alike."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(
            key.encode()
            + b"\0"
            + tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return {"model": name, "path": str(model.config._name_or_path), "sha256": digest.hexdigest()}
