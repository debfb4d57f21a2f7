# Trainer (GPU). Build from the repository root:
#   docker build -f deploy/docker/trainer.Dockerfile -t corrgrpo/trainer:0.1.0 .
# torch==2.13.0 from PyPI is the CUDA 13.0 build (it brings its own CUDA libraries as cuda-toolkit /
# nvidia-* wheels); the image needs only the driver (R580 or newer for CUDA 13), which the NVIDIA
# container toolkit mounts at run time. The base image matches that CUDA major version.
# constraints.txt pins torch==2.13.0+cpu (the CPU wheel used in development): that local-version
# suffix is dropped here so the same pins select the CUDA wheel.
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv
COPY constraints.txt /src/constraints.txt
COPY proto /src/proto
COPY trainer /src/trainer
RUN sed 's/^torch==\([0-9.]*\)+cpu$/torch==\1/' /src/constraints.txt > /src/constraints-cuda.txt \
 && /opt/venv/bin/pip install -c /src/constraints-cuda.txt /src/proto /src/trainer

FROM ${CUDA_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --create-home --shell /usr/sbin/nologin corrgrpo \
 && mkdir -p /app/trainer_out /home/corrgrpo/.cache/huggingface \
 && chown 10001 /app/trainer_out /home/corrgrpo/.cache/huggingface
COPY --from=build /opt/venv /opt/venv
# The configs' relative dataset paths (../shared/data/...) resolve to /shared/data, mounted by compose.
COPY trainer/configs /app/trainer/configs
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 HF_HOME=/home/corrgrpo/.cache/huggingface
WORKDIR /app
USER 10001
# The trainer has no HTTP endpoint; compose overrides the command per domain (see docker-compose.yml).
HEALTHCHECK NONE
CMD ["python", "-m", "corrgrpo_trainer", "train", "--config", "trainer/configs/code.yaml"]
