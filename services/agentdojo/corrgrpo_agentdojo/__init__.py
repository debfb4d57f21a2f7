"""corrgrpo agentdojo reward service."""
