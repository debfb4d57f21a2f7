"""The corrgrpo reward services in other RL stacks' contracts: `verl_reward` and `verl_estimator` (verl),
`nemo_gym`, `verifiers` (loaded as `corrgrpo_verifiers`), `openenv`.

Each module imports its stack (the estimator, corrgrpo-trainer too), so each needs that stack installed (the
package's extras); `service` holds what they share and needs only `corrgrpo_proto`.
"""
