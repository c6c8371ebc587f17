"""The process behind a detached ``lab up``: owns the lab's processes (they die with it), answers
the lab's control socket (restarts, compaction, network faults asked by other processes: see
control.py) and stops everything on SIGTERM, SIGINT or SIGHUP."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from .cluster import Lab, LabError, LabOptions


def options_to_json(options: LabOptions) -> str:
    return json.dumps(
        {
            "name": options.name,
            "nodes": options.nodes,
            "upstream_controllers": options.upstream_controllers,
            "scheduler_config": options.scheduler_config,
            "real_nodes": options.real_nodes,
            "run_dir": str(options.resolved_run_dir()),
            "bin_dir": str(options.resolved_bin_dir()),
        }
    )


def run(lab: Lab, stop: threading.Event) -> int:
    """Start ``lab``, report components that die, stop everything once ``stop`` is set."""
    try:
        lab.start()
    except LabError as e:
        print(f"lab: failed to start: {e}", flush=True)
        return 1
    reported: set[str] = set()
    try:
        while not stop.wait(1.0):
            reported -= set(lab.processes())  # restarted through the control socket
            for name, code in lab.dead_processes().items():
                if name not in reported:
                    reported.add(name)
                    print(f"lab: {name} exited with code {code}; see {lab.files.logs / (name + '.log')}", flush=True)
    finally:
        print("lab: stopping", flush=True)
        lab.stop()
        print("lab: stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operators.lab.supervisor")
    parser.add_argument("--options", required=True, help="LabOptions as JSON")
    raw = json.loads(parser.parse_args(argv).options)
    raw["run_dir"], raw["bin_dir"] = Path(raw["run_dir"]), Path(raw["bin_dir"])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    return run(Lab(LabOptions(**raw), log=lambda m: print(m, flush=True)), stop)


if __name__ == "__main__":
    sys.exit(main())
