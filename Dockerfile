# syntax=docker/dockerfile:1
# The one gitscale image: the controller, `run`, `serve` and the reconcile CronJob all run it
# (deploy/controller/deployment.yaml, and deploy/scaler/ as `gitscale init` writes it).
#
#   docker build -t ghcr.io/gitscale/gitscale:$(gitscale --version | cut -d' ' -f3) .
#
# release.yml builds and pushes it for linux/amd64 and linux/arm64 on each v* tag.
# Writable paths under readOnlyRootFilesystem (README, "Releasing and the image"): /tmp (clones
# of --repo URL, git's askpass script, crash reports) and $GITSCALE_CACHE_DIR
# (/var/cache/gitscale: the state cache of `reconcile`, `run` and `serve`); the controller writes
# nothing.

# The base, pinned by version. Its digest pin goes here, after the tag:
#   ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:<digest>
# (`docker buildx imagetools inspect python:3.11.15-slim-bookworm` prints it). Until a digest is
# committed here, release.yml resolves the tag's digest once and passes the pinned reference as
# --build-arg PYTHON_IMAGE, so both platforms of a release are built from the same base.
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

# -- stage 1: the wheel from this checkout, and a venv with it and the locked dependencies ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# The build backend (setuptools, pinned in pyproject.toml's build-system), hash-checked.
COPY requirements/build.txt requirements/build.txt
RUN pip install --require-hashes --no-deps -r requirements/build.txt
# The runtime dependencies, hash-checked, into a venv without pip or setuptools of its own
# (scripts/lock regenerates requirements/image.txt from pyproject.toml). The kubernetes
# client's asyncio twin (68 MB of the venv's 184) is removed: gitscale uses the blocking
# client only (tests/ship/test_image_venv.py runs the controller from a venv pruned alike).
COPY requirements/image.txt requirements/image.txt
RUN python -m venv --without-pip /opt/gitscale \
    && pip --python /opt/gitscale/bin/python install --require-hashes --no-deps \
        -r requirements/image.txt \
    && rm -rf /opt/gitscale/lib/python3.11/site-packages/kubernetes/aio
# The checkout (.dockerignore keeps the tests, docs and local state out) → a wheel → the venv.
COPY . .
# Given --build-arg VERSION (release.yml: the tag), the wheel must say the same.
ARG VERSION=""
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && pip --python /opt/gitscale/bin/python install --no-deps /wheels/gitscale-*.whl \
    && pip --python /opt/gitscale/bin/python check \
    && built="$(/opt/gitscale/bin/gitscale --version)" \
    && echo "${built}" \
    && { [ -z "${VERSION}" ] || [ "${built}" = "gitscale, version ${VERSION}" ]; }

# -- stage 2: the runtime ---------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
# Set by release.yml from the tag; a local build says "dev" unless given --build-arg VERSION=…
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/gitscale/gitscale
LABEL org.opencontainers.image.title="gitscale" \
      org.opencontainers.image.description="Scale self-hosted CI runners on Kubernetes through git" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# gitscale runs the git CLI for every clone, commit and push.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
# (apt-get clean: python's slim images drop the downloaded .debs by a docker-clean hook, but a
# base without it, a mirror's rebuild, would keep ~90 MB of them in this layer.)
# (DL3008, unpinned apt versions: Debian's archive keeps only the newest build of a package in a
# release, so `git=<version>` would stop building at its next security update. The release line
# is fixed by the base image's tag, bookworm; the digest pin above fixes the rest.)

# A numeric non-root user: deploy/controller/deployment.yaml and `init`'s manifests run as
# runAsUser 65532 with runAsNonRoot, which Kubernetes can check only against a numeric USER.
RUN groupadd --gid 65532 gitscale \
    && useradd --uid 65532 --gid 65532 --home-dir /home/gitscale --create-home \
        --shell /usr/sbin/nologin gitscale \
    && install -d -o 65532 -g 65532 -m 0750 /var/cache/gitscale

COPY --from=build /opt/gitscale /opt/gitscale

# HOME is only read (git looks for ~/.gitconfig there; nothing writes to it). With a read-only
# root filesystem, mount writable volumes at /tmp and at GITSCALE_CACHE_DIR.
ENV PATH=/opt/gitscale/bin:$PATH \
    HOME=/home/gitscale \
    GITSCALE_CACHE_DIR=/var/cache/gitscale \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/gitscale
USER 65532:65532
ENTRYPOINT ["gitscale"]
CMD ["--help"]
