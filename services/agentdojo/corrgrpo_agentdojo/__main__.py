"""`python -m corrgrpo_agentdojo --host H --port P`."""

from corrgrpo_service.cli import serve

from .app import DEFAULT_PORT, build
from .settings import AgentDojoSettings

serve("agentdojo", build, AgentDojoSettings, DEFAULT_PORT)
