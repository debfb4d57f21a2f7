"""`python -m corrgrpo_trainer ...`: see `corrgrpo_trainer.cli`."""

import sys

from .cli import main

sys.exit(main())
