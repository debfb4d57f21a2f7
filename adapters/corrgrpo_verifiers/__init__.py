"""The verifiers environment `corrgrpo-verifiers`: verifiers imports the module named after an environment id
(`vf-eval corrgrpo-verifiers`, `vf.load_environment("corrgrpo-verifiers")`) and calls its `load_environment`.
The environment itself is `corrgrpo_adapters.verifiers`.
"""

from corrgrpo_adapters.verifiers import load_environment

__all__ = ["load_environment"]
