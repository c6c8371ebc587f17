"""Hand the heap's free pages back to the system after a burst of work (glibc's malloc_trim).

After a burst (the node agent's publication: an inventory parsed, a thousand devices serialised
to JSON and the API server's answers parsed) glibc keeps what was freed in its heap, where it
counts in the process's RSS until reused: on a DaemonSet, on every node. ``malloc_trim(0)``
returns the free pages (2 MiB of the node agent's 64 MiB, bench/RESULTS.md, P4). Where the C
library is not glibc (musl, macOS) nothing is done.

And keep the cyclic garbage collector out of bulk work: each collection walks the objects
built so far, so building N objects costs several passes over all of them (decoding listings
took 3 to 7 times as long with a few thousand Pods already held, Python 3.11). What JSON
decodes, the modules imported and the caches primed hold no cycle that reference counting
would not free, so pausing the collector then costs no memory:

- ``bulk``: while a listing is decoded (any time, in any process);
- ``hold_until_started`` / ``started``: an operator's whole start-up, after which what it built
  is moved out of later collections' way (``gc.freeze``);
- the ``kubectl dra`` commands leave it off: they run once and exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
from collections.abc import Callable, Iterator


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own symbols, glibc's among them
    except (OSError, AttributeError):
        return None


def trim() -> bool:
    """Return the heap's free pages to the system; True when some were."""
    malloc_trim = _malloc_trim()
    return bool(malloc_trim is not None and malloc_trim(0))


_depth = 0  # bulk() sections open now (asyncio tasks interleave them)
_restore = False  # whether the collector was on when the first of them opened


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """The cyclic collector paused until the last open ``bulk`` section ends (it may span
    awaits: sections of concurrent tasks overlap); left off if it was off already."""
    global _depth, _restore
    if _depth == 0:
        _restore = gc.isenabled()
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _restore:
            gc.enable()


def hold_until_started() -> None:
    """Off from here until ``started`` (an operator process, before its imports)."""
    gc.disable()


def started() -> None:
    """Start-up is done: what it built lives on (modules, primed caches), so later collections
    skip it (``gc.freeze``), and the collector is on again (once no ``bulk`` section is open:
    another operator of this process may still be listing)."""
    global _restore
    gc.freeze()
    if _depth:
        _restore = True
    else:
        gc.enable()
