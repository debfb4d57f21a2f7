from corrgrpo_service import ServiceSettings
from corrgrpo_service.cli import serve

from .app import DEFAULT_PORT, build

serve("agentdojo", build, ServiceSettings, DEFAULT_PORT)
