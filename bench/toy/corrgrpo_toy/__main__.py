"""`python -m corrgrpo_toy --host H --port P` (from this folder: `PYTHONPATH=bench/toy`)."""

from corrgrpo_common.cli import serve

from .declaration import SERVICE

serve(SERVICE)
