"""`python -m corrgrpo_agentdojo --host H --port P`."""

from corrgrpo_service.cli import serve

from .declaration import SERVICE

serve(SERVICE)
