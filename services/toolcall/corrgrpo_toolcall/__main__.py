"""`python -m corrgrpo_toolcall --host H --port P`."""

from corrgrpo_service.cli import serve

from .app import DEFAULT_PORT, ToolCallSettings, build

serve("toolcall", build, ToolCallSettings, DEFAULT_PORT)
