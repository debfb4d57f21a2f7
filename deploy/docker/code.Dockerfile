# syntax=docker/dockerfile:1
# Code reward service. Build from the repository root:
#   docker build -f deploy/docker/code.Dockerfile -t corrgrpo/code:0.1.0 .
# Holds no torch: only proto, sandbox, services/common and services/code (and their pinned deps).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY constraints.txt /src/constraints.txt
COPY proto /src/proto
COPY sandbox /src/sandbox
COPY services/common /src/services/common
COPY services/code /src/services/code
RUN /opt/venv/bin/pip install -c /src/constraints.txt \
      /src/proto /src/sandbox /src/services/common /src/services/code

FROM ${PYTHON_IMAGE}
# bubblewrap isolates candidate programs (see deploy/README.md, "Sandbox privileges").
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap=0.8.0-2+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin corrgrpo
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001
EXPOSE 8101
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8101/healthz', timeout=2)"]
CMD ["python", "-m", "corrgrpo_code", "--host", "0.0.0.0", "--port", "8101"]
