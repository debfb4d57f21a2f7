"""The verifiers taskset `corrgrpo-verifiers`: verifiers imports the module named after a taskset id (`vf-eval
corrgrpo-verifiers`, `--env.taskset.id corrgrpo-verifiers`) and takes the Taskset, Harness and Env it exports.
All three are `corrgrpo_adapters.verifiers`'s.
"""

from corrgrpo_adapters.verifiers import ServiceEnv, ServiceHarness, ServiceTaskset

__all__ = ["ServiceEnv", "ServiceHarness", "ServiceTaskset"]
