"""`stacks/` drives the other RL stacks' own code from their side environments: `make interop` runs it."""

import os

collect_ignore = [] if os.environ.get("CORRGRPO_INTEROP") == "1" else ["stacks"]
