"""CorrGRPO / GRPO / GDPO advantages and a TRL trainer backed by the reward services."""
