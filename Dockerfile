# One image for every operator: `docker build -t dra-operators:0.1.0 .`, then the container's
# arguments choose the operator (claims, taints, binding, nodeagent).
# Dependencies come from requirements.lock (pinned, with hashes); regenerate it with
#   pip-compile --generate-hashes --strip-extras --output-file requirements.lock pyproject.toml

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN /opt/venv/bin/pip install --no-deps --no-build-isolation . \
 && /opt/venv/bin/python -m compileall -q /opt/venv

FROM python:3.11-slim
LABEL org.opencontainers.image.title="dra-operators" \
      org.opencontainers.image.description="Kubernetes DRA operators in Python: claims, taints, binding, nodeagent"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Non-root by default; the node agent's DaemonSet runs it as root for kubelet's directories.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["dra-operators", "run"]
CMD ["claims"]
