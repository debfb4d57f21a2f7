"""CorrGRPO / GRPO / GDPO advantages and a TRL trainer backed by the reward services.

Read top-down: cli.py (the commands) → train.py, one run: config.py (the YAML, the services checked) →
data.py and rewards.py (rows, one reward column per service component) → policy.py (the policy; models.py
resolves its name) → trl_trainer.py (TRL's GRPOTrainer with the advantages of advantages.py, the math).
agentdojo/ is multi-turn AgentDojo (tools, environment, rows, the paper's metrics, warm-up demonstrations);
sft.py the supervised warm-up; progress.py the step log of both; reward_json.py the `advantages` command's
input; tiny.py the random test policy (verl's estimator is in adapters/).
"""
