# Stand-in for the upstream nginx image (deploy/standin/build-base-images.sh), from Debian packages.
# The compose file mounts its own nginx.conf; wget is for its healthcheck.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx-light wget \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sf /dev/stderr /var/log/nginx/error.log
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
