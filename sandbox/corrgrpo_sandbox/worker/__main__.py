"""Start a worker: `python -I <package dir>/worker/__main__.py ARGS` (the argument list: `server.main`).

`-I` leaves this script's directory off `sys.path`. The directory above is put there only while `worker` is
imported, so a run can import nothing else of the package's (nor the parent's modules)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker import server

del sys.path[0]
server.main(sys.argv)
