"""Freed memory kept for reuse in a training process (glibc's allocator).

A training step allocates and frees the same large tensors every step: in the Multi30K recipe
the logits alone are 4,096 tokens x 8,000 types, 131 MB. glibc serves any block over its mmap
threshold (at most 32 MB) with a fresh ``mmap`` and hands it back to the kernel on free, so
every step the kernel maps and zeroes those pages again, one page fault per 4 KB. Telling
glibc never to use ``mmap`` for a block, and to give the top of its heap back only above
1 GiB, keeps the freed memory in the process for the next step.

The numbers a step computes do not change, only where its tensors live (torch aligns every
CPU tensor to 64 bytes either way); its effect on a step's speed is in docs/benchmarks.md
(``benchmarks/model.py --system-allocator`` runs without it).
"""

from __future__ import annotations

import ctypes
import functools
import sys

__all__ = ["keep_freed_memory"]

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_TRIM_ABOVE = 1 << 30  # bytes free at the heap's top before glibc returns them


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc (once per process) to keep freed blocks for reuse: True if it agreed, False
    where the C library is not glibc (musl, macOS, Windows), which is left as it is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)  # the symbols of the running process, its C library among them
    except OSError:
        return False
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE))
