"""Multi-turn AgentDojo: the policy acts in episodes of the AgentDojo service, reached only over HTTP.

tools.py (the suite's tools as methods TRL renders and calls) → trl_environment.py (TRL's environment: one
service episode per rollout, the reward columns) → trl_inputs.py (what GRPOTrainer is given: the config's
rows, environment classes and columns) → episode_metrics.py (the paper's metrics of a policy's episodes) and
demonstrations.py (ground-truth episodes for the supervised warm-up).
"""
