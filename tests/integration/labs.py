"""Starting labs for test fixtures: one way for the session's lab, the fault labs and the labs
with real nodes."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from operators.core.api.kube import MERGE_PATCH, Kube
from operators.core.api.resources import NODES
from operators.lab import Lab, LabOptions, paths


def short_run_dir(prefix: str) -> Path:
    """A run directory under /tmp: kubelet's plugin socket paths must fit in 107 characters."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@contextlib.contextmanager
def running_lab(
    suffix: str,
    run_dir: Path,
    *,
    nodes: int,
    real_nodes: int = 0,
    remove_run_dir: bool = False,
    node_namespaces: bool = False,
) -> Iterator[Lab]:
    """A started lab named after this pytest process, stopped at the end (and killed with pytest
    if it dies); with ``remove_run_dir`` its run directory goes too, unless the block failed
    (its logs are the evidence)."""
    if real_nodes:
        missing = paths.missing_real_node_binaries(paths.bin_dir())
        assert not missing, f"real-node binaries missing: {missing}; run `make lab-build-node`"
    lab = Lab(
        LabOptions(
            name=f"pytest-{os.getpid()}{suffix}",
            nodes=nodes,
            real_nodes=real_nodes,
            run_dir=run_dir,
            node_namespaces=node_namespaces,
        ),
        log=lambda message: print(message, flush=True),
    )
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()
    if remove_run_dir:
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def client_of(lab: Lab) -> AsyncIterator[Kube]:
    """An admin client of ``lab``, closed at the end."""
    client = await Kube.connect(str(lab.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


async def declare_node_feature(kube: Kube, feature: str) -> None:
    """Every Node declares ``feature`` beside what it declares already, as a 1.37 kubelet with
    the feature's gate does; kwok's Nodes declare nothing. (DRAOptionalNodeOperations: a slice
    that skips node operations is allocated only on such Nodes: allocator_experimental.go,
    allocateDevice.)"""
    for node in await kube.list(NODES):
        declared = set(node["status"].get("declaredFeatures") or []) | {feature}
        await kube.request(
            "PATCH",
            NODES.path(name=node["metadata"]["name"], subresource="status"),
            content_type=MERGE_PATCH,
            body={"status": {"declaredFeatures": sorted(declared)}},
        )
