"""NeMo Gym's servers without Ray: what `ng_run` starts, in one process (run by test_nemo_gym.py in
.venv-nemo-gym).

`python nemo_gym_servers.py CONFIG_JSON`: the global config NeMo Gym's servers read (NEMO_GYM_CONFIG_DICT),
the head server on its thread (as `ng_run` runs it), and every resources server and agent of the config built
by NeMo Gym's own classes and `setup_webserver()`, served by uvicorn on one event loop (NeMo Gym's aiohttp
client is one per process). `ng_run` would also start a Ray cluster (which binds the machine's network
address, not loopback) and a venv per server; neither takes part in a rollout. Prints `ready` once every
server listens.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

CLASSES = {  # the server classes `ng_run` would start from each folder's app.py
    "corrgrpo": "corrgrpo_adapters.nemo_gym:ScoreResourcesServer",
    "corrgrpo_agentdojo": "corrgrpo_adapters.nemo_gym:AgentDojoResourcesServer",
    "non_executing_simple_agent": (
        "responses_api_agents.non_executing_simple_agent.app:NonExecutingSimpleAgent"
    ),
    "gymnasium_agent": "responses_api_agents.gymnasium_agent.app:GymnasiumAgent",
}


def load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(__import__(module, fromlist=[name]), name)


async def main(config: dict[str, Any]) -> None:
    import uvicorn
    from nemo_gym.server_utils import HeadServer, ServerClient

    HeadServer.run_webserver()
    client = ServerClient(
        head_server_config=ServerClient.load_head_server_config(), global_config_dict=_global()
    )
    servers = []
    for top, kinds in config.items():
        if top == "head_server":
            continue
        for by_name in kinds.values():
            for name, settings in by_name.items():
                if name not in CLASSES:
                    continue  # the policy: served by the test
                cls = load(CLASSES[name])
                config_cls = cls.model_fields["config"].annotation
                server = cls(
                    config=config_cls.model_validate({**settings, "name": top}), server_client=client
                )
                uvicorn_config = uvicorn.Config(
                    server.setup_webserver(),
                    host=settings["host"],
                    port=settings["port"],
                    log_level="warning",
                )
                servers.append(uvicorn.Server(uvicorn_config))
    tasks = [asyncio.ensure_future(server.serve()) for server in servers]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            await asyncio.gather(*tasks)
            raise RuntimeError("a server stopped while starting")
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


def _global() -> Any:
    from nemo_gym.global_config import get_global_config_dict

    return get_global_config_dict()


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        loaded = json.load(handle)
    os.environ["NEMO_GYM_CONFIG_DICT"] = json.dumps(loaded)  # before NeMo Gym reads its global config
    asyncio.run(main(loaded))
