# dra-operators: `make test` is the one test command (CI runs it on a fresh machine).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LAB_BIN := .cache/lab/bin
PYTEST_ARGS ?=

.PHONY: help venv lock lint docs reference lab-modules lab-build lab-build-node image test-prerequisites test unit integration run soak bench bench-scale e2e lab-up lab-down protos clean monitoring-check test-versions

help:
	@echo "make run           a lab (no root needed), operators, node agents, examples, live table; uses \$$KUBECONFIG if set"
	@echo "make test          install, lint, docs, build the lab if needed, run unit and integration tests"
	@echo "make unit          unit tests only (no lab)"
	@echo "make lint          ruff (lint, format), mypy, import contracts (lint-imports); part of make test"
	@echo "make docs          the documentation site from docs/ (mkdocs build --strict) into build/docs; part of make test"
	@echo "make reference     regenerate docs/reference/*.md from the code (settings, metrics, Events, commands, lint rules)"
	@echo "make lock          regenerate requirements.lock and requirements-dev.lock from pyproject.toml"
	@echo "make soak          one-hour churn soak of claims, taints, binding and node agents (SOAK_SECONDS, SOAK_WARMUP); bench/RESULTS.md"
	@echo "make bench         ours vs upstream's controllers on one lab (BENCH_SIZES, BENCH_NOISE, ...); bench/RESULTS.md"
	@echo "make bench-scale   ours vs upstream at fractions of 5,000 Nodes / 150,000 Pods (SCALE_FRACTIONS, SCALE_PARTS); bench/RESULTS.md"
	@echo "make monitoring-check  alert rules and dashboards: promtool, then a real Prometheus on a live lab (docs/development/monitoring-check.md)"
	@echo "make e2e           upstream's DRA e2e suite with ours and with upstream's controllers (root; E2E_ARGS); docs/e2e.md"
	@echo "make test-versions the version-sensitive tests on a lab of each Kubernetes minor we claim (VERSIONS=1.35); docs/versions.md"
	@echo "make lab-build     build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, kwok, toxiproxy"
	@echo "make lab-build-node  build what real nodes need: kubelet, containerd, runc, CNI plugins, busybox"
	@echo "make image         the container image with buildah (no Docker engine), as .cache/image/dra-operators-<version>.tar"
	@echo "make lab-up        start a lab in the background (dra-operators lab up)"
	@echo "make lab-down      stop it"
	@echo "make lab-modules   regenerate lab/*/go.mod from lab/versions.env"
	@echo "make protos        regenerate the kubelet plugin's gRPC code from its .proto files"

# The virtualenv, from requirements-dev.lock (every package pinned, with hashes: the runtime ones at
# the versions of requirements.lock, which the image installs, plus the test and lint tools): made
# anew when the lock changes, so that it holds what the lock says and nothing else (as on a fresh
# machine, as in CI). Then the project itself, without dependencies, again when pyproject.toml
# changes; setuptools, pinned in the lock, builds it (no build isolation: nothing unpinned is fetched).
# pip installs uv alone from its pin in the lock, and uv the whole lock (`pip sync`: exactly the
# lock, compiled, in about 10 s against pip's 80); where uv cannot install, pip does it all.
UV_PIN = awk '/^uv==/ {p = 1; print; next} p && /^ / {print; next} {p = 0}' requirements-dev.lock
$(VENV)/.locked: requirements-dev.lock
	$(PYTHON) -m venv --clear $(VENV)
	$(UV_PIN) > $(VENV)/uv.lock
	$(PY) -m pip install --quiet --require-hashes --only-binary=:all: --no-deps -r $(VENV)/uv.lock
	$(VENV)/bin/uv pip sync --quiet --python $(PY) --require-hashes --only-binary :all: --compile-bytecode \
	  requirements-dev.lock || { echo "make venv: uv failed, installing with pip" >&2; \
	  $(PY) -m pip install --quiet --require-hashes --only-binary=:all: -r requirements-dev.lock; }
	touch $@

$(VENV)/.installed: $(VENV)/.locked pyproject.toml
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

venv: $(VENV)/.installed

# The two dependency locks, from pyproject.toml, with hashes (pip-tools' pip-compile, itself pinned in
# requirements-dev.lock): requirements.lock, the runtime dependencies the image installs, and
# requirements-dev.lock for make's venv (CI's too): requirements.lock's very versions (its
# constraint) plus the extras test and dev, pip and setuptools (image/build-requirements.lock's).
# After a change to pyproject.toml's dependencies `make lock` is all there is to do: a pin that
# still fits stays, a new dependency gets its newest version, a removed one goes with whatever it
# alone pulled in. LOCK_ARGS=--upgrade moves every pin to the newest allowed version
# (LOCK_ARGS="--upgrade-package NAME" one). The locks are for the image's Python, 3.11.
LOCK_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --generate-hashes \
	--strip-extras --allow-unsafe --no-emit-find-links --no-emit-index-url $(LOCK_ARGS)
lock: venv
	$(LOCK_COMPILE) --output-file requirements.lock pyproject.toml
	$(LOCK_COMPILE) --extra test --extra dev --constraint requirements.lock \
	  --constraint image/build-requirements.lock --output-file requirements-dev.lock pyproject.toml

# The generated code is checked in; this is the command that regenerates it.
protos: venv
	PATH=$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -I . --python_out=. --grpclib_python_out=. operators/nodeagent/plugin/kubeletapi/*.proto
	@# grpcio's stubs, for the tests' clients only (the agent serves with grpclib; the image has no grpcio)
	rm -rf .cache/protos && mkdir -p .cache/protos
	$(PY) -m grpc_tools.protoc -I . --grpc_python_out=.cache/protos operators/nodeagent/plugin/kubeletapi/*.proto
	cp .cache/protos/operators/nodeagent/plugin/kubeletapi/*_pb2_grpc.py tests/grpcio_stubs/

lab-modules:
	lab/gen-modules.sh

lab-build:
	lab/build.sh $(LAB_BIN)

# Real nodes (lab up --real-nodes): kubelet, containerd, runc, CNI plugins; apt-get installs
# libseccomp-dev and pkg-config when missing. A lab without real nodes never needs these.
lab-build-node:
	lab/build.sh --node $(LAB_BIN)

# Real nodes need root (mounts, bridges, cgroups): the demo adds one only as root, and the
# real-node tests skip as another user. So the targets below build the real-node binaries (and
# run apt-get) only as root; as another user they build just the control plane.
AS_ROOT := $(filter 0,$(shell id -u))
REAL_NODE_BUILD := $(if $(AS_ROOT),lab-build-node)

# The container image without a Docker engine (buildah, root; apt-get installs buildah and
# debootstrap when missing): a docker-archive .cache/image/dra-operators-<version>.tar naming
# docker.io/library/dra-operators:<version>. The base is Debian's python3 from debootstrap, built
# once per machine (cached in ~/.cache/dra-operators/image); IMAGE_BASE=python:3.11-slim pulls one.
image:
	image/build.sh

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: venv lab-build $(REAL_NODE_BUILD)
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# Everything the tests need, built side by side: the image's build waits mostly on downloads and
# disk (debootstrap, pip, buildah), the lab's on the CPU (Go).
# (The image needs root, as the real-node tests that use it; as another user both are skipped.)
test-prerequisites:
	$(MAKE) --no-print-directory -j3 venv lab-build $(REAL_NODE_BUILD) $(if $(AS_ROOT),image)

# The static checks, configured in pyproject.toml: ruff's lint and its formatting, mypy (strict
# for core.dra and core.api, normal elsewhere) and the import contracts (lint-imports). Each runs
# even when one before it failed; the target fails if any did. One line a finding (`ruff format
# --diff .` shows what the formatter would change).
LINT_CHECKS := "ruff check --output-format concise ." "ruff format --check --output-format concise ." "mypy" \
  "lint-imports --no-logo"
lint: venv
	@failed=; for check in $(LINT_CHECKS); do echo "make lint: $$check"; \
	  $(VENV)/bin/$$check || failed="$$failed, $$check"; done; \
	  if [ -n "$$failed" ]; then echo "make lint: failed: $${failed#, }" >&2; exit 1; fi

# The documentation site (mkdocs.yml): strict, so a broken link or anchor, a missing page or a page
# left out of the navigation fails. Seconds; build/ is ignored by git. `.venv/bin/mkdocs serve`
# shows it while editing.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir build/docs

# docs/reference/*.md are generated from the code (operators/docsgen.py); the unit tests in
# tests/unit/test_docs_reference.py fail when a checked-in page differs from what this writes.
reference: venv
	$(PY) -m operators.docsgen docs/reference

# lint first: it takes seconds, the lab minutes. pytest exits 5 when it collected nothing: that is
# a failure here, never a pass. Three xdist workers on two cores: much of a test is waiting on its
# lab, and two workers left a third of the cores idle (three: 19 to 22 minutes of tests, not 25). The
# tests are grouped by lab and handed out longest first (tests/conftest.py); `python -m
# tests.group_seconds` reads build/test-report.xml and gives each group's seconds for its table.
# PYTEST_ARGS="-n 0" runs everything in one process.
test: lint docs test-prerequisites
	$(PY) -m pytest tests/unit tests/integration -n 3 --dist loadgroup --no-loadscope-reorder --durations=30 \
	  --junitxml=build/test-report.xml $(PYTEST_ARGS); \
	  code=$$?; if [ $$code -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$code

# Upstream's DRA e2e suite on a lab with real nodes, with our controllers and with upstream's: a
# report like bench, not part of test (about an hour). E2E_ARGS="--controllers ours --focus ..." narrows it.
# A report, not part of `make test`: the version-sensitive tests on a lab of each Kubernetes minor
# we claim (lab/versions.env), each built on first use; the table goes into docs/versions.md.
test-versions: venv lab-build $(REAL_NODE_BUILD)
	$(PY) -m tests.versions_report $(if $(VERSIONS),--minors $(VERSIONS))

e2e: venv lab-build lab-build-node
	lab/build.sh --e2e $(LAB_BIN)
	$(PY) -m operators.lab.e2e $(E2E_ARGS)

# The alert rules and dashboards of kustomize/components/monitoring: promtool's checks and unit
# tests, then a real Prometheus (lab/build.sh --monitoring) scraping a lab's operators during a
# workload, every expression evaluated and the expected alerts fired. A few minutes; not part of
# test (docs/development/monitoring-check.md). The report: build/monitoring-check.md.
monitoring-check: venv lab-build
	lab/build.sh --monitoring $(LAB_BIN)
	rm -f build/monitoring-check.md; DRA_MONITORING_CHECK=1 $(PY) -m pytest tests/monitoring -n 0 --durations=10 \
	  --basetemp=build/monitoring-tmp $(PYTEST_ARGS); \
	  code=$$?; [ ! -f build/monitoring-check.md ] || cat build/monitoring-check.md; exit $$code

# A lab without real nodes needs only the control plane: no root, no apt-get. As root the demo
# also starts a real kubelet node, so the real-node binaries are built then.
# With KUBECONFIG set the demo uses that cluster: DEMO_ARGS="--yes --kcm-dra-controllers-off" (docs).
# It needs no lab then, so none is built.
run: venv $(if $(KUBECONFIG),,lab-build $(REAL_NODE_BUILD))
	$(VENV)/bin/dra-operators demo $(DEMO_ARGS)

# A benchmark, not a test (not part of `make test`): an hour of churn, RSS sampled, end state
# checked; SOAK_SECONDS (default 3600) and SOAK_WARMUP (600) shorten it. Results: bench/RESULTS.md.
soak: venv lab-build
	$(PY) bench/soak.py

# A benchmark, not a test (not part of `make test`): our claims, taints and node agent against
# upstream's controllers on one lab; the knobs (BENCH_SIZES, BENCH_NOISE, ...) in docs/development/bench-soak.md.
bench: venv lab-build
	$(if $(BENCH_PROFILE),$(PY) -m pip install --quiet -e '.[bench]')
	$(PY) bench/bench.py

# A benchmark, not a test (not part of `make test`): our controllers and upstream's at fractions
# of Kubernetes' scalability envelope (SCALE_FRACTIONS=0.1,0.25,0.5,1; SCALE_PARTS), a section of
# bench/RESULTS.md per command. The whole envelope takes hours on 2 cores.
bench-scale: venv lab-build
	$(if $(BENCH_PROFILE),$(PY) -m pip install --quiet -e '.[bench]')
	$(PY) bench/scale.py

lab-up: venv lab-build
	$(VENV)/bin/dra-operators lab up

lab-down: venv
	$(VENV)/bin/dra-operators lab down

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
