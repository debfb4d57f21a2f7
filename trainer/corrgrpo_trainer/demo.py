"""`make demo`: start the three services locally (in-memory store) and show they answer.

The full demo (scoring real completions, advantages side by side, a few CorrGRPO steps) comes
with the trainer; until then this checks the embedded default end to end.
"""

from __future__ import annotations

import subprocess
import sys
import time

from corrgrpo_proto import RewardClient

SERVICES = {"code": 8101, "toolcall": 8102, "agentdojo": 8103}


def main() -> int:
    processes = [
        subprocess.Popen([sys.executable, "-m", f"corrgrpo_{name}", "--port", str(port)]) for name, port in SERVICES.items()
    ]
    try:
        for name, port in SERVICES.items():
            client = RewardClient(f"http://127.0.0.1:{port}", retries=20, backoff=0.2, max_backoff=1)
            names = [c.name for c in client.components().components]
            print(f"{name:10s} http://127.0.0.1:{port}  components: {', '.join(names)}")
        return 0
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
