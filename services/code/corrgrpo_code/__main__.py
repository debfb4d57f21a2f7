"""`python -m corrgrpo_code --host H --port P`."""

from corrgrpo_common.cli import serve

from .declaration import SERVICE

serve(SERVICE)
