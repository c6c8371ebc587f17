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


# -- bulk: the cyclic collector paused while listings are decoded --------------------------------


def test_bulk_pauses_the_collector_until_the_last_section_ends():
    import asyncio
    import gc

    seen = []

    async def section(name: str, hold: asyncio.Event, release: asyncio.Event) -> None:
        with heap.bulk():
            seen.append((name, "in", gc.isenabled()))
            hold.set()
            await release.wait()
        seen.append((name, "out", gc.isenabled()))

    async def main() -> None:
        a_in, b_in, a_go, b_go = (asyncio.Event() for _ in range(4))
        a = asyncio.create_task(section("a", a_in, a_go))
        await a_in.wait()
        b = asyncio.create_task(section("b", b_in, b_go))
        await b_in.wait()
        a_go.set()  # the first section ends while the second is still open
        await a
        b_go.set()
        await b

    assert gc.isenabled()
    asyncio.run(main())
    assert seen == [("a", "in", False), ("b", "in", False), ("a", "out", False), ("b", "out", True)]
    assert gc.isenabled()


def test_bulk_leaves_a_collector_that_was_off_off():
    import gc

    gc.disable()
    try:
        with heap.bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_collection_runs_while_a_listing_is_decoded_in_bulk():
    import gc
    import json

    listing = json.dumps({"items": [{"metadata": {"name": f"p{i}"}, "spec": {"x": [i]}} for i in range(20000)]})
    before = [s["collections"] for s in gc.get_stats()]
    with heap.bulk():
        items = json.loads(listing)["items"]
        during = [s["collections"] for s in gc.get_stats()]
    assert len(items) == 20000 and during == before


def test_an_operator_start_up_holds_the_collector_and_freezes_what_it_built():
    import gc

    try:
        heap.hold_until_started()
        built = [{"pod": i} for i in range(1000)]
        assert not gc.isenabled()
        frozen_before = gc.get_freeze_count()
        heap.started()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen_before + len(built)
    finally:
        gc.unfreeze()
        gc.enable()


def test_started_while_another_operator_lists_turns_the_collector_on_after_it():
    import gc

    try:
        heap.hold_until_started()
        with heap.bulk():  # the second operator of the process, still listing
            heap.started()  # the first one is done
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()
