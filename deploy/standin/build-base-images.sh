#!/usr/bin/env bash
# Offline stand-ins for the upstream base images the Dockerfiles and docker-compose.yml use
# (Python, Redis, nginx), built from Debian bookworm packages only: for machines that reach the
# Debian and PyPI mirrors but no image registry. Production builds keep the upstream images.
#
#   deploy/standin/build-base-images.sh     # then: export the three variables below, docker compose build
#
# Image names (the compose file reads the same variables; defaults are the upstream images there):
#   CORRGRPO_PYTHON_IMAGE  (default here corrgrpo-standin/python:bookworm)
#   CORRGRPO_REDIS_IMAGE   (default here corrgrpo-standin/redis:bookworm)
#   CORRGRPO_NGINX_IMAGE   (default here corrgrpo-standin/nginx:bookworm)
# The debootstrap root file system is cached as a tarball in CORRGRPO_STANDIN_CACHE
# (/var/cache/corrgrpo-standin), so a rerun costs a `docker import` at most. Needs root and debootstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
docker=${DOCKER:-docker}
python_image=${CORRGRPO_PYTHON_IMAGE:-corrgrpo-standin/python:bookworm}
redis_image=${CORRGRPO_REDIS_IMAGE:-corrgrpo-standin/redis:bookworm}
nginx_image=${CORRGRPO_NGINX_IMAGE:-corrgrpo-standin/nginx:bookworm}
cache=${CORRGRPO_STANDIN_CACHE:-/var/cache/corrgrpo-standin}
suite=bookworm
# python-is-python3: the Dockerfiles call `python`, as in the upstream python image.
packages=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
tarball=$cache/$suite-minbase-$(printf '%s %s' "$packages" "$mirror" | sha1sum | cut -c1-12).tar
base=corrgrpo-standin/debian:$suite

if [ ! -s "$tarball" ]; then
  mkdir -p "$cache"
  root=$(mktemp -d /var/tmp/corrgrpo-rootfs.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  echo "debootstrap $suite from $mirror (about 1.5 min)" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  # Trust the host's extra CAs (a TLS-intercepting egress proxy): pip and apt in the builds go through it.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
fi

# The tarball's name is in the image label: a changed package list or mirror re-imports.
if [ "$($docker image inspect -f '{{index .Config.Labels "corrgrpo.rootfs"}}' "$base" 2>/dev/null)" != "$(basename "$tarball")" ]; then
  $docker import \
    --change "LABEL corrgrpo.rootfs=$(basename "$tarball")" \
    --change 'ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null
fi
$docker tag "$base" "$python_image"
$docker build -q --build-arg BASE="$base" -t "$redis_image" -f "$here/redis.Dockerfile" "$here" >/dev/null
$docker build -q --build-arg BASE="$base" -t "$nginx_image" -f "$here/nginx.Dockerfile" "$here" >/dev/null
echo "stand-in images: $python_image $redis_image $nginx_image" >&2
