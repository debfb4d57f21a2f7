"""The corrgrpo reward services in other RL stacks' contracts: `nemo_gym`, `openenv` (and `corrgrpo_verifiers`).

Each module imports its stack, so each needs that stack installed (the package's extras); `service` holds what
they share and needs only `corrgrpo_proto`.
"""
