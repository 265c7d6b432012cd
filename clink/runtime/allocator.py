"""How the C allocator hands out the memory of numpy's temporary arrays.

Arrow buffers come from Arrow's own pool. numpy's arrays come from the C library's ``malloc``,
and a pipeline makes many short-lived ones of the same size: a 64K-row batch gives 512 KiB
arrays for every hash, mask and index step. glibc serves a request of 128 KiB or more with a
fresh ``mmap`` (its threshold only rises past a size once a larger block was freed, and a block
of the same size does not raise it), and returns freed memory at the top of its heap to the
system at once. Either way the next array of that size starts as untouched pages that the kernel
must fault in and zero: measured here, hashing a 64K-row key column took 0.8-1.4 ms that way and
0.2-0.4 ms with the settings below.

``tune()`` raises both thresholds for the process that runs a pipeline, so such arrays reuse the
heap. It keeps at most ``TRIM_BYTES`` of freed memory for reuse.

Not higher: keyed state grows by doubling numpy arrays, each growth freeing the old array. A
block under the mmap threshold comes from the heap, and once freed stays resident as a hole that
a batch's smaller arrays only partly reuse. With the threshold at 32 MiB and 128 MiB kept, q16
over 10M events (two COUNT(DISTINCT) states of 5-6M keys) peaked at 683-693 MiB; at 4 MiB and
32 MiB, at 602-611 MiB, with the same CPU time, as q9 and q15 also had. A batch's arrays, 512 KiB
for 64K rows, stay far below it.

It leaves everything alone where
the C library is not glibc, and where the user has set ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` in the environment (their choice wins).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_BYTES", "TRIM_BYTES", "tune"]

#: Blocks of at least this size get their own mapping, returned to the system when freed.
MMAP_BYTES = 4 * 1024 * 1024
#: Free memory at the top of the heap beyond this goes back to the system.
TRIM_BYTES = 32 * 1024 * 1024

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_tuned: bool | None = None


def tune() -> bool:
    """Set glibc's thresholds once per process; True if they are in effect."""
    global _tuned
    if _tuned is not None:
        return _tuned
    _tuned = False
    if not sys.platform.startswith("linux"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES))
    return _tuned
