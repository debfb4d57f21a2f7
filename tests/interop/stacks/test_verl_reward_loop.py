"""verl 0.9.1's own code with the corrgrpo services (run in .venv-verl by `make interop`).

verl's reward loop (`RewardLoopWorker` → `NaiveRewardManager` → our `compute_score`, loaded by verl from the
config) and the registered `corrgrpo` estimator, configured by the documented command line, on both trainers:
- the default (v1): the agent loop's `AgentLoopWorkerTQ._agent_loop_postprocess` scores each session and puts
  it in verl's TransferQueue (real, on a local Ray), and `PPOTrainer._compute_advantage` computes the
  advantages from it and puts them back;
- the legacy trainer (`trainer.use_v1=false`): its batch assembly (`AgentLoopWorker._postprocess`,
  `extract_reward`) and `compute_advantage`.
Only the rollout engine and the model are left out (the reward worker is called in-process, not as a Ray
actor); the services are real processes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import ray
import torch
import transfer_queue as tq
import verl
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    _InternalAgentLoopOutput,
)
from verl.experimental.reward_loop import RewardLoopWorker
from verl.trainer.ppo import core_algos, ray_trainer
from verl.trainer.ppo.reward import extract_reward
from verl.trainer.ppo.v1 import AgentLoopWorkerTQ, PPOTrainerSync

from corrgrpo_adapters import verl_estimator, verl_reward
from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.advantages import corrgrpo
from corrgrpo_trainer.tiny import build_tiny_tokenizer

GT = (
    '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}\n'
    "</tool_call>"
)
WRONG = GT.replace("Paris", "Rome")
CODE = (  # a correct HumanEval/0
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```"
)
AGENTDOJO = json.dumps({"suite": "banking", "user_task": "user_task_0"})
KEYS = ["format", "syntax", "compile", "runtime", "correct", "name", "param_names", "param_values"]


def overrides(
    urls: dict[str, str], reward_path: str = "pkg://corrgrpo_adapters.verl_reward", legacy: bool = True
) -> list[str]:
    """The documented command line (README), as Hydra overrides: the legacy trainer's, or the default's
    (v1)."""
    services = ",".join(f"{name}:'{url}'" for name, url in sorted(urls.items()))
    return [
        *(["trainer.use_v1=false"] if legacy else []),
        "algorithm.adv_estimator=corrgrpo",
        f"+algorithm.corrgrpo_reward_keys=[{','.join(KEYS)}]",
        f"reward.custom_reward_function.path={reward_path}",
        "reward.custom_reward_function.name=compute_score",
        f"+reward.custom_reward_function.reward_kwargs.corrgrpo_services={{{services}}}",
    ]


def verl_config(extra: list[str]) -> Any:
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None
    ):
        return compose("ppo_trainer", overrides=extra)


@pytest.fixture(scope="module")
def urls() -> dict[str, str]:
    with (
        start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as code,
        start_service("toolcall") as toolcall,
        start_service("agentdojo") as agentdojo,
    ):
        yield {"code": code.url, "toolcall": toolcall.url, "agentdojo": agentdojo.url}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tokenizer")
    build_tiny_tokenizer().save_pretrained(path)
    return str(path)


def reward_batch(tokenizer: Any, samples: list[tuple[str, str, Any, dict[str, Any]]]) -> list[DataProto]:
    """One DataProto per sample, as verl's agent loop hands each to the reward loop (response ends in EOS)."""
    items = []
    for source, response, truth, extra in samples:
        prompt_ids = tokenizer("<|im_start|>user\nsolve<|im_end|>\n", add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        batch = TensorDict(
            {
                "prompts": torch.tensor([prompt_ids]),
                "responses": torch.tensor([response_ids]),
                "attention_mask": torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.long),
            },
            batch_size=1,
        )
        non_tensor = {
            "data_source": np.array([source], dtype=object),
            "reward_model": np.array([{"ground_truth": truth}], dtype=object),
            "extra_info": np.array([dict(extra)], dtype=object),
        }
        items.append(DataProto(batch=batch, non_tensor_batch=non_tensor))
    return items


def score(config: Any, samples: list[tuple[str, str, Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """verl's reward loop over the samples, concurrently, as `RewardLoopWorker.compute_score_batch` does."""

    async def run() -> list[dict[str, Any]]:
        worker = RewardLoopWorker(config)
        return list(
            await asyncio.gather(
                *(worker.compute_score(item) for item in reward_batch(worker.input_tokenizer, samples))
            )
        )

    return asyncio.run(run())


def assembled(outputs: list[dict[str, Any]], uids: list[str]) -> DataProto:
    """verl's batch assembly of the scored samples (`AgentLoopWorker._postprocess`), then the legacy
    trainer's glue."""
    inputs = [
        _InternalAgentLoopOutput(
            prompt_ids=torch.zeros(1, 2, dtype=torch.long),
            response_ids=torch.zeros(1, 3, dtype=torch.long),
            input_ids=torch.zeros(1, 5, dtype=torch.long),
            position_ids=torch.arange(5).unsqueeze(0),
            response_mask=torch.ones(1, 3, dtype=torch.long),
            attention_mask=torch.ones(1, 5, dtype=torch.long),
            reward_score=output["reward_score"],
            metrics=AgentLoopMetrics(),
            extra_fields={"reward_extra_info": output["reward_extra_info"]},
        )
        for output in outputs
    ]
    batch = AgentLoopWorker._postprocess(SimpleNamespace(reward_loop_worker_handles=None), inputs)
    reward_tensor, extra_infos = extract_reward(batch)
    # RayPPOTrainer.fit, "adv" section (verl/trainer/ppo/ray_trainer.py): what it does before
    # compute_advantage
    batch.batch["token_level_scores"] = reward_tensor
    batch.non_tensor_batch.update({k: np.array(v) for k, v in extra_infos.items()})
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    batch.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    return batch


def test_plugin_registers_the_estimator_and_patches_the_legacy_trainer() -> None:
    assert core_algos.get_adv_estimator_fn("corrgrpo") is verl_estimator.compute_corrgrpo_outcome_advantage
    assert getattr(ray_trainer.compute_advantage, "corrgrpo_passes_components", False)


def test_the_command_line_passes_verls_config_validation() -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    parts = ("actor.ppo", "rollout.log_prob", "ref.log_prob")
    batch_sizes = [f"actor_rollout_ref.{part}_micro_batch_size_per_gpu=4" for part in parts]
    config = verl_config([*overrides({"code": "http://127.0.0.1:8101"}), *batch_sizes])
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    assert not need_critic(config) and config.algorithm.corrgrpo_reward_keys == KEYS


@pytest.mark.parametrize("form", ["pkg", "file"])
def test_reward_function_loads_by_package_or_file_path(
    form: str, urls: dict[str, str], tokenizer_dir: str
) -> None:
    path = "pkg://corrgrpo_adapters.verl_reward" if form == "pkg" else verl_reward.__file__
    config = verl_config([*overrides(urls, path), f"actor_rollout_ref.model.path={tokenizer_dir}"])
    (output,) = score(config, [("toolcall", GT, GT, {})])
    assert output["reward_score"] == pytest.approx(4.0)  # format 1 + ToolRL correctness 3


def test_mixed_batch_one_key_set_and_corrgrpo_advantages(urls: dict[str, str], tokenizer_dir: str) -> None:
    config = verl_config([*overrides(urls), f"actor_rollout_ref.model.path={tokenizer_dir}"])
    samples = [
        ("code", CODE, "HumanEval/0", {"index": 0}),  # first item: verl takes the extra keys from it
        (
            "code",
            "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
            "HumanEval/0",
            {},
        ),
        ("code", "no code at all", "HumanEval/0", {}),
        ("toolcall", GT, GT, {}),
        ("toolcall", WRONG, GT, {}),
        ("toolcall", "<think>x</think> no call", GT, {}),
        ("agentdojo", "<response>Done.</response>", AGENTDOJO, {}),
        ("agentdojo", "<response>Nothing.</response>", AGENTDOJO, {}),
    ]
    outputs = score(config, samples)
    keys = {frozenset(output["reward_extra_info"]) for output in outputs}
    assert len(keys) == 1 and set(KEYS) | {"utility", "security", "score", "corrgrpo_error"} <= next(
        iter(keys)
    )
    assert (
        outputs[0]["reward_extra_info"]["correct"] == 1.0
        and outputs[1]["reward_extra_info"]["correct"] == 0.0
    )
    assert outputs[3]["reward_score"] == pytest.approx(4.0) and outputs[4]["reward_score"] < 4.0

    uids = ["c"] * 3 + ["t"] * 3 + ["a"] * 2
    batch = ray_trainer.compute_advantage(
        assembled(outputs, uids),
        adv_estimator=config.algorithm.adv_estimator,
        num_repeat=3,
        config=config.algorithm,
    )
    components = torch.tensor([[output["reward_extra_info"][key] for key in KEYS] for output in outputs])
    # declared weights
    scored_with = [json.loads(output["reward_extra_info"]["corrgrpo_weights"]) for output in outputs]
    components *= torch.tensor([[weights.get(key, 0.0) for key in KEYS] for weights in scored_with])
    for rows in (slice(0, 3), slice(3, 6), slice(6, 8)):
        expected = corrgrpo(components[rows].unsqueeze(0))[0]
        assert torch.allclose(batch.batch["advantages"][rows, 0], expected, atol=1e-6)
    assert not torch.allclose(
        batch.batch["advantages"][0:3, 0], core_grpo(components[0:3].sum(-1)), atol=1e-3
    )


def core_grpo(totals: torch.Tensor) -> torch.Tensor:
    """verl's own GRPO advantage of one group's totals, for contrast."""
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=totals.unsqueeze(-1),
        response_mask=torch.ones(len(totals), 1),
        index=np.array(["g"] * len(totals)),
    )
    return advantages[:, 0]


def test_without_components_it_is_a_clear_error(urls: dict[str, str]) -> None:
    config = verl_config(overrides(urls))
    data = DataProto(
        batch=TensorDict(
            {"token_level_rewards": torch.randn(4, 3), "response_mask": torch.ones(4, 3)}, batch_size=4
        ),
        non_tensor_batch={"uid": np.array(list("aabb"), dtype=object)},  # another reward function's batch
    )
    with pytest.raises(KeyError, match="reward_extra_info"):
        ray_trainer.compute_advantage(data, adv_estimator="corrgrpo", config=config.algorithm)


def test_other_estimators_are_untouched() -> None:
    data = DataProto(
        batch=TensorDict(
            {"token_level_rewards": torch.randn(4, 3), "response_mask": torch.ones(4, 3)}, batch_size=4
        ),
        non_tensor_batch={"uid": np.array(list("aabb"), dtype=object)},
    )
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo")
    expected, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
    )
    assert torch.equal(out.batch["advantages"], expected)


def test_default_v1_trainer_brings_the_components_to_corrgrpo(
    urls: dict[str, str], tokenizer_dir: str
) -> None:
    """verl's v1 path end to end from the agent loop's output to the advantages in the TransferQueue.

    Group "t" holds a two-turn session (two outputs, the final one scored) and two single-turn ones: the
    session counts once, by its final output, and both its outputs get that advantage (verl's GRPO rule).
    """
    config = verl_config([*overrides(urls, legacy=False), f"actor_rollout_ref.model.path={tokenizer_dir}"])
    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "sync"  # verl's defaults
    sessions = {  # (uid, session): the outputs of one agent loop run, the last one scored
        ("c", 0): [("code", CODE, "HumanEval/0")],
        ("c", 1): [("code", "no code at all", "HumanEval/0")],
        ("c", 2): [
            (
                "code",
                "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
                "HumanEval/0",
            )
        ],
        ("t", 0): [("toolcall", "<think>x</think> let me look", GT), ("toolcall", GT, GT)],
        ("t", 1): [("toolcall", WRONG, GT)],
        ("t", 2): [("toolcall", "<think>x</think> no call", GT)],
    }
    # Logical CPUs: the TransferQueue's controller and each of its 8 storage units reserve one (hangs below
    # 9).
    ray.init(num_cpus=16, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(config.transfer_queue)
        try:
            keys, extras = put_sessions(config, sessions)
            # verl's own method, without the workers it does not use here
            trainer = object.__new__(PPOTrainerSync)
            trainer.config = config
            tags = [{"status": "success"} for _ in keys]
            trainer._compute_advantage(tq.KVBatchMeta(keys=keys, tags=tags, partition_id="train"), metrics={})
            stored = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])[
                "advantages"
            ]
            advantages = torch.stack([row[0] for row in stored.unbind(0)])
        finally:
            tq.close()
    finally:
        ray.shutdown()
    weights = [json.loads(info["corrgrpo_weights"]) for info in extras]
    components = torch.tensor(
        [[info[key] * w.get(key, 0.0) for key in KEYS] for info, w in zip(extras, weights, strict=True)]
    )
    final = {key.rsplit("_", 1)[0]: row for row, key in enumerate(keys)}  # the later output of a session wins
    for uid in ("c", "t"):
        rows = [row for session, row in final.items() if session.startswith(f"{uid}_")]
        expected = corrgrpo(components[rows].unsqueeze(0))[0]
        assert torch.allclose(advantages[rows], expected, atol=1e-5)
    two_turn = [row for row, key in enumerate(keys) if key.startswith("t_0_")]
    assert len(two_turn) == 2 and advantages[two_turn[0]] == advantages[two_turn[1]] != 0


def put_sessions(
    config: Any, sessions: dict[tuple[str, int], list[tuple[str, str, str]]]
) -> tuple[list[str], list[Any]]:
    """Each session through verl's `AgentLoopWorkerTQ._agent_loop_postprocess`: scored, then put in the
    queue."""

    async def run() -> None:
        reward_worker = RewardLoopWorker(config)
        tokenizer = reward_worker.input_tokenizer
        # verl's agent loop worker class (a Ray actor class around it) as a rollout leaves it, without an
        # engine
        worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)
        worker.__dict__.update(
            reward_loop_worker_handles=[
                SimpleNamespace(compute_score=SimpleNamespace(remote=reward_worker.compute_score))
            ],
            processor=None,
            tokenizer=tokenizer,
            mm_processor_kwargs=None,
            distillation_enabled=False,
        )
        prompt = tokenizer("<|im_start|>user\nsolve<|im_end|>\n", add_special_tokens=False)["input_ids"]
        for (uid, session), turns in sessions.items():
            outputs = []
            for _, response, _ in turns:
                response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [
                    tokenizer.eos_token_id
                ]
                outputs.append(
                    AgentLoopOutput(
                        prompt_ids=prompt,
                        response_ids=response_ids,
                        response_mask=[1] * len(response_ids),
                        metrics=AgentLoopMetrics(),
                        extra_fields={},
                    )
                )
            source, _, truth = turns[-1]
            await worker._agent_loop_postprocess(
                outputs,
                validate=False,
                uid=uid,
                session_id=session,
                global_steps=1,
                data_source=source,
                reward_model={"ground_truth": truth},
                extra_info={},
            )

    asyncio.run(run())
    keys = [
        f"{uid}_{session}_{index}"
        for (uid, session), turns in sessions.items()
        for index in range(len(turns))
    ]
    extra = (
        tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])
        .pop("extra_fields")
        .tolist()
    )
    return keys, [(getattr(fields, "data", fields))["reward_extra_info"] for fields in extra]
