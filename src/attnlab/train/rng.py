"""The global random states a run depends on, saved with each checkpoint (JSON-safe: base64,
no pickle) and restored on resume, so that a resumed run draws the same dropout masks and
augmentations as one never interrupted."""

from __future__ import annotations

import base64
import contextlib
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .distributed import world

__all__ = [
    "capture_rng",
    "global_rng_untouched",
    "rank_seed",
    "restore_rng",
    "seed_rngs",
]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def capture_rng(device: torch.device) -> dict[str, Any]:
    """The torch (CPU, and CUDA when training there), Python and NumPy global RNG states."""
    version, words, gauss_next = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": _b64(torch.get_rng_state().numpy().tobytes()),
        "python": {
            "version": version,
            "state": _b64(np.asarray(words, dtype=np.uint32).tobytes()),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "kind": np_kind,
            "keys": _b64(np.asarray(np_keys, dtype=np.uint32).tobytes()),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
    }
    if device.type == "cuda":
        state["cuda"] = _b64(torch.cuda.get_rng_state(device).numpy().tobytes())
    return state


def restore_rng(state: Mapping[str, Any], device: torch.device) -> None:
    """Set the global RNG states to ``state`` (from :func:`capture_rng`)."""
    torch.set_rng_state(torch.frombuffer(bytearray(_unb64(state["torch"])), dtype=torch.uint8))
    py = state["python"]
    words = tuple(np.frombuffer(_unb64(py["state"]), dtype=np.uint32).tolist())
    random.setstate((py["version"], words, py["gauss_next"]))
    npy = state["numpy"]
    keys = np.frombuffer(_unb64(npy["keys"]), dtype=np.uint32).copy()
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    if device.type == "cuda" and "cuda" in state:
        cuda = torch.frombuffer(bytearray(_unb64(state["cuda"])), dtype=torch.uint8)
        torch.cuda.set_rng_state(cuda, device)


def rank_seed(seed: int, rank: int) -> int:
    """A well-mixed 63-bit seed for ``rank`` of a run seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] >> 1)


@contextlib.contextmanager
def global_rng_untouched(device: torch.device) -> Iterator[None]:
    """Run a block (the user's hook) without changing torch's, Python's or NumPy's RNG state."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def seed_rngs(
    state: Mapping[str, Any] | None, *, seed: int, step: int, rank: int, device: torch.device
) -> None:
    """Seed torch's RNG for rank ``rank`` of a fresh run (``state`` None) seeded with ``seed``,
    or restore a resumed run's RNG states from its checkpoint's ``state`` (saved at ``step``).
    With another number of replicas than the checkpoint's, the data order is unchanged (global
    batches do not depend on it), but the dropout draws differ from the interrupted run's: each
    rank is seeded afresh."""
    if state is None:
        torch.manual_seed(rank_seed(seed, rank))
        return
    rngs = state["rng"]
    _, world_size = world()
    if state["world_size"] == world_size and len(rngs) == world_size:
        restore_rng(rngs[rank], device)
    else:
        torch.manual_seed(rank_seed(seed, step * 65536 + rank))
