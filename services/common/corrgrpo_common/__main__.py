"""`python -m corrgrpo_common up [NAME ...]`: the services as local processes (launcher.py)."""

import sys

from .launcher import main

sys.exit(main())
