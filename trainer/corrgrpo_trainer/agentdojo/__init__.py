"""Multi-turn AgentDojo: the policy acts in episodes of the AgentDojo service, reached only over HTTP.

tools.py (the suite's tools as methods TRL renders and calls) → environment.py (one episode per rollout, the
reward columns) → episodes.py (the config's rows, environment classes and columns) → evaluate.py (the paper's
metrics) and demonstrations.py (ground-truth episodes for the supervised warm-up).
"""
