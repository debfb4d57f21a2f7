"""NeMo Gym entrypoint of the corrgrpo code / tool-call resources server (`corrgrpo_adapters.nemo_gym`)."""

from corrgrpo_adapters.nemo_gym import ScoreResourcesServer

if __name__ == "__main__":
    ScoreResourcesServer.run_webserver()
