"""Isolated, timed execution of untrusted Python. Knows nothing of rewards or HTTP."""

from corrgrpo_sandbox.execution import ExecResult, Limits
from corrgrpo_sandbox.sandbox import RunCancelled, Sandbox

__all__ = ["ExecResult", "Limits", "RunCancelled", "Sandbox"]
