"""NeMo Gym entrypoint of the corrgrpo AgentDojo resources server (`corrgrpo_adapters.nemo_gym`)."""

from corrgrpo_adapters.nemo_gym import AgentDojoResourcesServer

if __name__ == "__main__":
    AgentDojoResourcesServer.run_webserver()
