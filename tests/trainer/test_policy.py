"""policy.py's TRL settings for the machine: bf16 and pinned memory only where a GPU is."""

from __future__ import annotations

import pytest
import torch

from corrgrpo_trainer.models import EMBEDDED, TINY
from corrgrpo_trainer.policy import device_args


@pytest.mark.parametrize("gpu", [False, True])
def test_device_args_ask_for_bf16_and_pinned_memory_only_with_a_gpu(
    gpu: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert device_args(EMBEDDED) == {"bf16": gpu, "dataloader_pin_memory": gpu}
    assert device_args(TINY) == {"bf16": False, "dataloader_pin_memory": gpu}  # the tiny policy: float32
