"""Isolated, timed execution of untrusted Python. Knows nothing of rewards or HTTP."""
