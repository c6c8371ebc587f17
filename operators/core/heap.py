"""Hand the heap's free pages back to the system after a burst of work (glibc's malloc_trim).

After a burst (the node agent's publication: an inventory parsed, a thousand devices serialised
to JSON and the API server's answers parsed) glibc keeps what was freed in its heap, where it
counts in the process's RSS until reused: on a DaemonSet, on every node. ``malloc_trim(0)``
returns the free pages (2 MiB of the node agent's 64 MiB, bench/RESULTS.md, P4). Where the C
library is not glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


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
