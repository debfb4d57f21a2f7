"""Isolated, timed execution of untrusted Python. Knows nothing of what the programs it runs are for."""

from corrgrpo_sandbox.execution import ExecResult, Limits, RunCancelled
from corrgrpo_sandbox.isolation import IsolationUnavailable
from corrgrpo_sandbox.sandbox import Sandbox

__all__ = ["ExecResult", "IsolationUnavailable", "Limits", "RunCancelled", "Sandbox"]
