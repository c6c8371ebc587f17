# One image for every operator: `docker build -t dra-operators:0.1.0 .`, then the container's
# arguments choose the operator (claims, taints, binding, nodeagent). Without a Docker engine:
# `make image` (image/build.sh, buildah) builds it on a local Debian base and exports an archive.
# Dependencies come from requirements.lock (pinned, with hashes); `make lock` regenerates it from
# pyproject.toml, with requirements-dev.lock (the same versions plus the test and lint tools).
#
# BASE: any image with python3 3.11 and its venv module: the public python:3.11-slim (python3 in
# /usr/local/bin) or Debian's python3 and python3-venv (/usr/bin; make image's default base).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# A CA bundle for pip, for networks that intercept TLS: make image lends the host's to the RUN
# steps (a bind mount, not part of any layer). Unset, pip trusts its own bundle.
ARG PIP_CERT
WORKDIR /src
# Build tools (setuptools, hashed) in a venv of their own: the image's venv never gets them.
COPY image/build-requirements.lock ./
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --only-binary=:all: -r build-requirements.lock
# The dependencies: a layer that stays cached while requirements.lock and the base are unchanged.
# The venv module's setuptools goes: nothing here needs it at run time.
COPY requirements.lock ./
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock \
 && /opt/venv/bin/pip uninstall --yes --quiet setuptools
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
 && /opt/venv/bin/pip install --no-deps /tmp/wheels/*.whl \
 && /opt/venv/bin/python -m compileall -q /opt/venv

FROM ${BASE}
# The package's version (pyproject.toml); make image passes it, the tests check the default.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="dra-operators" \
      org.opencontainers.image.description="Kubernetes DRA operators in Python: claims, taints, binding, nodeagent" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Non-root by default; the node agent's DaemonSet runs it as root for kubelet's directories.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["dra-operators", "run"]
CMD ["claims"]
