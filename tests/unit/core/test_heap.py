"""heap.trim hands freed heap pages back on glibc (this machine's C library and the image's)."""

import ctypes
import subprocess
import sys

from operators.core import heap

# A burst of small objects freed again: glibc keeps the pages until trimmed.
_BURST = """
import json, sys
from operators.core import heap
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024
base = rss()
garbage = [json.dumps({"device": i, "attributes": {"model": "x" * 64}}) * 8 for i in range(60000)]
kept = [s[:1] for s in garbage[::97]]  # a few survivors scattered over the heap, as in real bursts
del garbage
before = rss()
trimmed = heap.trim()
print(json.dumps({"base": base, "before": before, "after": rss(), "trimmed": trimmed}))
"""


def test_trim_returns_freed_pages_to_the_system():
    import json

    out = json.loads(subprocess.run([sys.executable, "-c", _BURST], capture_output=True, text=True, check=True).stdout)
    assert out["trimmed"] is True, out
    assert out["after"] < out["before"] - 5, out  # MiB: without the trim RSS stays where it was


def test_trim_is_a_no_op_without_malloc_trim(monkeypatch):
    heap._malloc_trim.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError("no glibc here")))
    try:
        assert heap.trim() is False
    finally:
        heap._malloc_trim.cache_clear()
