"""``explain`` reports as text for people (JSON and YAML are the report itself)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _events(events: list[Obj], indent: str) -> list[str]:
    return [
        f"{indent}event {e['type']} {e['reason']}"
        + (f" (x{e['count']})" if (e.get("count") or 1) > 1 else "")
        + f": {e['message']}"
        for e in events
    ]


def _requests(story: Obj, indent: str, wide: bool) -> list[str]:
    lines = []
    for request in story.get("requests") or []:
        alternatives = request["alternatives"]
        if len(alternatives) > 1:
            lines.append(
                f"{indent}request {request['name']} (first available of {len(alternatives)}): {request['verdict']}"
            )
            sub = indent + "  "
        else:
            sub = indent
        for a in alternatives:
            mark = "ok " if a["enough"] else "NO "
            lines.append(
                f"{sub}{mark}{'subrequest' if len(alternatives) > 1 else 'request'} {a['name']}: {a['summary']}"
            )
            if a["fit"] and (wide or not a["enough"]):
                lines.append(f"{sub}    fit: {', '.join(a['fit'][:8])}" + (" ..." if len(a["fit"]) > 8 else ""))
            if not a["enough"] or wide:
                for c in a["closest"]:
                    detail = f" ({c['detail']})" if c["detail"] else ""
                    on = f" on {', '.join(c['nodes'])}" if c["nodes"] else ""
                    lines.append(f"{sub}    closest: {c['device']}{on}: {c['reason']}{detail}")
    for note in story.get("constraints") or []:
        lines.append(f"{indent}constraint {note}")
    return lines


def _story(story: Obj, indent: str, wide: bool) -> list[str]:
    lines = [f"{indent}{story['summary']}"]
    binding = story.get("binding")
    if binding:
        for c in binding["met"]:
            lines.append(f"{indent}  binding condition {c['condition']} on {c['device']}: True")
        for c in binding["pending"]:
            lines.append(
                f"{indent}  binding condition {c['condition']} on {c['device']}: {c['status']}"
                + (f" ({c['message']})" if c.get("message") else "")
            )
        for f in binding["failed"]:
            lines.append(
                f"{indent}  binding FAILURE {f['condition']} on {f['device']}: "
                f"{f.get('message') or f.get('reason') or 'True'}"
            )
    for d in story.get("devices") or []:
        extra = "".join(
            f" {k}={v}"
            for k, v in (
                ("share", d.get("shareID")),
                ("admin", d.get("adminAccess")),
                ("consumed", d.get("consumedCapacity")),
            )
            if v
        )
        lines.append(f"{indent}  {d['request']}: {d['device']}{extra}")
    lines += _requests(story, indent + "  ", wide)
    lines += _events(story.get("events") or [], indent + "  ")
    return lines


def _verdict(verdict: Obj, wide: bool) -> list[str]:
    word = {True: "allocatable", False: "NOT allocatable", None: "UNKNOWN"}[verdict["allocatable"]]
    lines = [f"Verdict: {word}: {verdict['summary']}"]
    for f in verdict.get("notModelled") or []:
        lines.append(f"  not modelled: {f['feature']} (feature gate {f['featureGate']}): {f['field']}")
    for node in verdict.get("nodes") or []:
        if node.get("error"):
            text = f"ERROR {node['error']}"
        elif node["fits"]:
            if not wide:
                continue
            devices = "; ".join(", ".join(c) for c in node.get("devices") or [])
            text = "fits" + (f": {devices}" if devices else "")
        elif node.get("filtered") and not wide:
            continue  # listed under "Nodes"
        else:
            text = node.get("why") or "does not fit"
        lines.append(f"  node {node['node']}: {text}")
    return lines


def render_pod(report: Obj, wide: bool = False) -> str:
    pod = report["pod"]
    scheduled = pod.get("scheduled") or {}
    head = f"Pod {pod['namespace']}/{pod['name']}: {pod.get('phase') or 'unknown phase'}"
    if pod.get("node"):
        head += f" on {pod['node']}"
    elif scheduled.get("status") == "False":
        head += f", not scheduled ({scheduled.get('reason')}: {scheduled.get('message')})"
    lines = [head]
    if report.get("note"):
        lines.append(f"Note: {report['note']}")
    lines += _verdict(report["verdict"], wide)
    nodes = report["nodes"]
    rejected = nodes["rejected"]
    line = f"Nodes: {len(nodes['usable'])} the Pod can use"
    if nodes["usable"]:
        line += f" ({', '.join(nodes['usable'][:6])}{' ...' if len(nodes['usable']) > 6 else ''})"
    if rejected:
        line += f"; {len(rejected)} ruled out by its node filters"
    lines.append(line)
    if rejected and (wide or not nodes["usable"]):
        for name, why in list(rejected.items())[: None if wide else 5]:
            lines.append(f"  {name}: {why}")
    for story in report["claims"]:
        lines.append("")
        name = story.get("claim") or "-"
        lines.append(f"Claim {story['podClaim']} -> {name} [{story['state']}]")
        lines += _story(story, "  ", wide)
    if report.get("events"):
        lines.append("")
        lines += _events(report["events"], "")
    return "\n".join(lines)


def render_claim(report: Obj, wide: bool = False) -> str:
    story = report["claim"]
    lines = [
        f"ResourceClaim {report['namespace']}/{story['claim']} [{story['state']}]"
        + (f" (owner Pod {', '.join(report['ownerPods'])})" if report["ownerPods"] else "")
    ]
    if story.get("verdict"):
        lines += _verdict(story["verdict"], wide)
    lines += _story(story, "  ", wide)
    return "\n".join(lines)
