# One image recipe for the three reward services; docker-compose.yml passes the build args. Build from
# the repository root, e.g.:
#   docker build -f deploy/docker/service.Dockerfile --build-arg SERVICE=toolcall --build-arg PORT=8102 \
#     -t corrgrpo/toolcall:0.1.0 .
# SERVICE: the folder under services/ (module corrgrpo_<SERVICE>); PORT: its DEFAULT_PORT;
# LOCAL_PARTS: further repository folders it installs (the code service: sandbox);
# APT_PACKAGES: Debian packages of the runtime stage (the code service: bubblewrap).
# The code image holds no torch: only proto, sandbox, services/common and services/code (and their pinned deps).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SERVICE
ARG LOCAL_PARTS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY constraints.txt /src/constraints.txt
COPY proto /src/proto
COPY sandbox /src/sandbox
COPY services/common /src/services/common
COPY services/${SERVICE} /src/services/${SERVICE}
RUN /opt/venv/bin/pip install -c /src/constraints.txt /src/proto /src/services/common /src/services/${SERVICE} \
      $(for part in ${LOCAL_PARTS}; do echo /src/${part}; done)

FROM ${PYTHON_IMAGE}
ARG SERVICE
ARG PORT
ARG APT_PACKAGES=""
RUN if [ -n "${APT_PACKAGES}" ]; then \
      apt-get update && apt-get install -y --no-install-recommends ${APT_PACKAGES} && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin corrgrpo
COPY --from=build /opt/venv /opt/venv
# HEALTHCHECK and CMD read these at run time (Docker expands build args in neither).
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 SERVICE=${SERVICE} PORT=${PORT}
USER 10001
EXPOSE ${PORT}
# One start period for all (AgentDojo's import takes a few seconds): it only delays an "unhealthy"
# verdict, the first answer makes a container healthy. Docker does not expand build args in
# HEALTHCHECK options, so it cannot be one.
HEALTHCHECK --interval=10s --timeout=3s --start-period=40s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ[\"PORT\"]}/healthz', timeout=2)"
CMD exec python -m "corrgrpo_${SERVICE}" --host 0.0.0.0 --port "${PORT}"
