# syntax=docker/dockerfile:1
# AgentDojo episode service. Build from the repository root:
#   docker build -f deploy/docker/agentdojo.Dockerfile -t corrgrpo/agentdojo:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY constraints.txt /src/constraints.txt
COPY proto /src/proto
COPY services/common /src/services/common
COPY services/agentdojo /src/services/agentdojo
RUN /opt/venv/bin/pip install -c /src/constraints.txt /src/proto /src/services/common /src/services/agentdojo

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin corrgrpo
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001
EXPOSE 8103
# AgentDojo's import takes a few seconds: a longer start period.
HEALTHCHECK --interval=10s --timeout=3s --start-period=40s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8103/healthz', timeout=2)"]
CMD ["python", "-m", "corrgrpo_agentdojo", "--host", "0.0.0.0", "--port", "8103"]
