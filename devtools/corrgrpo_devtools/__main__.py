"""`python -m corrgrpo_devtools up [NAME ...]`: the services as local processes (launcher.py)."""

import sys

from .launcher import main

sys.exit(main())
