"""The C allocator's thresholds for a process that runs a pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECK = """
import ctypes, sys
from clink.runtime import allocator
tuned = allocator.tune()
assert allocator.tune() == tuned  # once per process
# glibc's mallinfo2 reports nothing about thresholds; a block just under the new mmap threshold
# must now come from the heap (no mapping): hblkhd counts bytes in mapped blocks.
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
def mapped(size):
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    grown = libc.mallinfo2().hblkhd - before
    libc.free(ctypes.c_void_p(block))
    return grown >= size
# A batch's temporaries (under 4 MiB) come from the heap; a keyed state's large arrays, freed as
# they grow, are mapped, so freeing one returns its memory.
print(tuned, mapped(1 << 20), mapped(3 << 20), mapped(8 << 20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux only")
def test_a_pipeline_process_serves_large_temporaries_from_the_heap() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "False", "True"], out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux only")
def test_the_users_own_setting_wins() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, env=env).stdout.split()
    assert out == ["False", "True", "True", "True"], out
