"""One lint run: read the files, fill the context from the cluster when one is given, apply
the rules and the server's dry run."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import cluster, documents, report, rules


@dataclass
class Result:
    findings: list[rules.Finding] = field(default_factory=list)
    loaded: documents.Loaded = field(default_factory=documents.Loaded)
    files: int = 0
    mode: str = "offline"

    @property
    def failed(self) -> bool:
        return bool(self.loaded.errors) or any(f.severity == rules.ERROR for f in self.findings)


def offline(paths: list[str], namespace: str = "default") -> Result:
    loaded = documents.load(paths)
    ctx = rules.Context(documents=loaded.documents, default_namespace=namespace)
    return Result(rules.check(ctx), loaded, len(documents.expand(paths)), "offline")


async def against(kube, paths: list[str], namespace: str, dry_run: bool = True) -> Result:
    """With the cluster: its served versions and published devices, and its dry run."""
    loaded = documents.load(paths)
    ctx = rules.Context(documents=loaded.documents, default_namespace=namespace)
    await cluster.fill(kube, ctx)
    own = rules.check(ctx)
    server = await cluster.dry_run_all(kube, ctx) if dry_run else []
    return Result(
        report.merge(own, server),
        loaded,
        len(documents.expand(paths)),
        "cluster, server dry run" if dry_run else "cluster",
    )
