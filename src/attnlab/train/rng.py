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

from .._checks import brief, is_int, is_number
from .distributed import world

__all__ = [
    "capture_rng",
    "check_rng_states",
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


_MT_WORDS = 624  # the Mersenne Twister's state, Python's and NumPy's


def check_rng_states(rngs: object, world_size: int) -> None:
    """Raise ValueError naming the first entry of ``rngs`` (a checkpoint's ``rng``: one
    :func:`capture_rng` per replica) that is not a state the generators accept: a wrong type,
    size or value. Each is tried on a scratch generator; no global state changes."""
    if not (isinstance(rngs, list) and len(rngs) == world_size):
        raise ValueError(f"rng: expected a list of {world_size} states, got {brief(rngs)}")
    for rank, state in enumerate(rngs):
        where = f"rng[{rank}]"
        if not isinstance(state, dict) or not {"torch", "python", "numpy"} <= set(state):
            raise ValueError(
                f"{where}: expected torch, python and numpy states, got {brief(state)}"
            )
        unknown = set(state) - {"torch", "python", "numpy", "cuda"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        size = torch.get_rng_state().numel()
        raw = _bytes(state["torch"], f"{where}.torch", size)
        try:
            torch.Generator().set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        except RuntimeError as e:
            raise ValueError(f"{where}.torch: not a generator state ({e})") from None
        _check_python(state["python"], f"{where}.python")
        _check_numpy(state["numpy"], f"{where}.numpy")
        if "cuda" in state:
            expected = torch.cuda.get_rng_state().numel() if torch.cuda.is_available() else None
            _bytes(state["cuda"], f"{where}.cuda", expected)


def _check_python(py: object, where: str) -> None:
    if not (isinstance(py, dict) and set(py) == {"version", "state", "gauss_next"}):
        raise ValueError(f"{where}: expected version, state and gauss_next, got {brief(py)}")
    raw = _bytes(py["state"], f"{where}.state", 4 * (_MT_WORDS + 1))
    words = tuple(np.frombuffer(raw, dtype=np.uint32).tolist())
    gauss = py["gauss_next"]
    if gauss is not None and not is_number(gauss):
        raise ValueError(f"{where}.gauss_next: expected a number or null, got {brief(gauss)}")
    try:
        random.Random().setstate((py["version"], words, gauss))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a generator state ({e})") from None


def _check_numpy(npy: object, where: str) -> None:
    keys = {"kind", "keys", "pos", "has_gauss", "cached_gaussian"}
    if not (isinstance(npy, dict) and set(npy) == keys):
        raise ValueError(f"{where}: expected {sorted(keys)}, got {brief(npy)}")
    raw = _bytes(npy["keys"], f"{where}.keys", 4 * _MT_WORDS)
    pos, has_gauss = npy["pos"], npy["has_gauss"]
    if not (is_int(pos) and 0 <= pos <= _MT_WORDS):
        raise ValueError(f"{where}.pos: expected an int in [0, {_MT_WORDS}], got {brief(pos)}")
    if has_gauss not in (0, 1) or isinstance(has_gauss, bool):
        raise ValueError(f"{where}.has_gauss: expected 0 or 1, got {brief(has_gauss)}")
    if not is_number(npy["cached_gaussian"]):
        raise ValueError(f"{where}.cached_gaussian: expected a number")
    keys_array = np.frombuffer(raw, dtype=np.uint32).copy()
    try:
        np.random.RandomState().set_state(
            (npy["kind"], keys_array, pos, has_gauss, npy["cached_gaussian"])
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a generator state ({e})") from None


def _bytes(text: object, where: str, size: int | None) -> bytes:
    """The bytes of the base64 ``text``, of length ``size`` (None: any)."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected base64 text, got {brief(text)}")
    try:
        raw = _unb64(text)
    except (ValueError, UnicodeEncodeError):
        raise ValueError(f"{where}: not valid base64") from None
    if size is not None and len(raw) != size:
        raise ValueError(f"{where}: {len(raw)} bytes, expected {size}")
    return raw


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
