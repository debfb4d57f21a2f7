"""`python -m corrgrpo_code --host H --port P`."""

from corrgrpo_service.cli import serve

from .app import DEFAULT_PORT, build
from .settings import CodeSettings

serve("code", build, CodeSettings, DEFAULT_PORT)
