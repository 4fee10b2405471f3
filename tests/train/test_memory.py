"""attnlab.train.memory: a training process keeps freed memory for its next step (glibc)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Run in a fresh interpreter: the setting is process-wide and once set stays set.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    import torch
    from attnlab.train.memory import keep_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2

    def mapped_while_holding(count):
        before = libc.mallinfo2().hblkhd
        x = torch.ones(count)  # written, so its pages are really there
        during = libc.mallinfo2().hblkhd
        del x
        return during - before

    big = 50_000_000  # 200 MB of float32, above any mmap threshold glibc accepts
    print(mapped_while_holding(big) >= 4 * big)
    print(keep_freed_memory(), keep_freed_memory())
    print(mapped_while_holding(big))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_large_tensors_come_from_the_heap_once_asked() -> None:
    import ctypes

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33 (no mallinfo2 to observe the allocator with)")
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    # Before: glibc maps a 200 MB block of its own. After: asked once (the second call is
    # cached), and the same block comes from the heap, no bytes mapped for it.
    assert out == ["True", "True", "True", "0"]


def test_other_platforms_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnlab.train import memory

    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.keep_freed_memory.__wrapped__() is False

    class NotGlibc:  # a C library without glibc's symbols (musl)
        pass

    monkeypatch.setattr(memory.sys, "platform", "linux")
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: NotGlibc())
    assert memory.keep_freed_memory.__wrapped__() is False
