"""safetensors files, read with care and written with errors that name the file.

:func:`read_safetensors_header` checks a file from its header alone (its structure, that the
data is all there) before anything is allocated; :func:`read_safetensors` then reads the
tensors (each a copy in torch's own, aligned memory) and checks the floats finite;
:func:`save_safetensors` writes one canonically (equal tensors and metadata, equal bytes),
its errors naming the file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ._checks import check_type

__all__ = [
    "FLOAT_DTYPES",
    "MAX_HEADER_BYTES",
    "TensorInfo",
    "read_safetensors",
    "read_safetensors_header",
    "save_safetensors",
]

#: safetensors' own limit on the JSON header.
MAX_HEADER_BYTES = 100 * 1024 * 1024

_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
#: An integer dtype of each element size, to read any tensor's bytes (bfloat16 has no NumPy
#: dtype; a view as integers of its size has).
_SAME_SIZE_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header: its dtype and shape."""

    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def read_safetensors_header(
    path: str | os.PathLike[str],
) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """The tensors (``name -> TensorInfo``) and the metadata of the safetensors file ``path``,
    from its header alone (nothing else is read or allocated).

    The file is an 8-byte little-endian header length, a JSON header, and the tensors' bytes,
    which the header's ``data_offsets`` must cover exactly, in order and to the end of the file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``PATH: not a readable safetensors file: WHY`` (truncated, a damaged or
            oversized header, offsets that do not fit the shapes or the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing (every saved model directory has it, e.g. OUT/model of attnlab train)"
        )

    def bad(why: str) -> ValueError:
        return ValueError(f"{path}: not a readable safetensors file: {why}")

    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = handle.read(8)
        if len(start) < 8:
            raise bad(f"{size} bytes, shorter than the 8-byte header length (truncated?)")
        length = int.from_bytes(start, "little")
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise bad(f"a header of {length:,} bytes in a file of {size:,} (truncated?)")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad(f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise bad("__metadata__ is not a mapping of strings")
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if not (isinstance(entry, dict) and set(entry) == {"dtype", "shape", "data_offsets"}):
            raise bad(f"{name}: expected dtype, shape and data_offsets, got {entry!r:.80}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _DTYPES:
            raise bad(f"{name}: dtype {dtype!r:.20} is not one of {list(_DTYPES)}")
        if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
            raise bad(f"{name}: shape {shape!r:.80} is not a list of sizes")
        if not (
            isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
        ):
            raise bad(f"{name}: data_offsets {offsets!r:.80} are not two offsets")
        info = TensorInfo(_DTYPES[dtype], tuple(shape))
        if offsets[1] - offsets[0] != info.numel * info.dtype.itemsize:
            raise bad(f"{name}: data_offsets {offsets} do not hold a {dtype} tensor of {shape}")
        tensors[name] = info
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise bad(f"{name}: data starts at byte {begin}, expected {end} (a gap or overlap)")
        end = stop
    if 8 + length + end != size:
        raise bad(
            f"the header describes {end:,} bytes of data, the file holds {size - 8 - length:,} "
            f"({'truncated' if 8 + length + end > size else 'trailing bytes'})"
        )
    return tensors, metadata


def read_safetensors(
    path: str | os.PathLike[str], *, finite: bool = True
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors and metadata of the safetensors file ``path``, its header checked first
    (:func:`read_safetensors_header`); with ``finite``, a float tensor holding NaN or an
    infinity is an error too (a damaged file). Errors: ValueError naming the file (and the
    tensor)."""
    from safetensors import SafetensorError, safe_open

    header, metadata = read_safetensors_header(path)
    tensors: dict[str, Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as handle:
            if set(handle.keys()) != set(header):  # the file changed since its header was read
                raise ValueError("it changed while being read")
            for name in header:
                # A copy in memory of torch's own (aligned) allocation: the same kernels, so
                # the same results, as weights allocated by the model.
                tensors[name] = handle.get_tensor(name).clone()
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable safetensors file: {e}") from None
    if finite:
        for name, tensor in tensors.items():
            if tensor.dtype.is_floating_point and not _finite(tensor):
                raise ValueError(
                    f"{path}: {name}: holds NaN or infinite values (a damaged file, or saved "
                    f"from a run that diverged)"
                )
    return tensors, metadata


def save_safetensors(
    tensors: Mapping[str, Tensor], path: str | os.PathLike[str], metadata: Mapping[str, str]
) -> None:
    """Write ``tensors`` and ``metadata`` to the safetensors file ``path``, canonically: equal
    tensors and metadata give equal bytes, whatever the process (safetensors' own writer puts
    the metadata in the order of a hash map seeded afresh in each process).

    The layout is safetensors' (read by it and by every reader of the format): an 8-byte
    little-endian header length; the JSON header, compact, ``__metadata__`` first with its keys
    sorted, then the tensors largest dtype first and by name (safetensors' order, which keeps
    each tensor aligned), padded with spaces to a multiple of 8 bytes; the tensors' bytes,
    little-endian, in that order. Tensors sharing memory are each written whole.

    Raises:
        TypeError, ValueError: a name, value or dtype the format cannot hold.
        OSError: the write failed (its errno, naming the file).
    """
    named = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensors: names must be str, got {type(name).__name__}")
        check_type(tensor, Tensor, f"tensors: {name}", "a torch.Tensor")
        if tensor.dtype not in _NAMES:
            raise ValueError(f"tensors: {name}: dtype {tensor.dtype} is not one of {list(_NAMES)}")
        named[name] = tensor
    for key, value in metadata.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise TypeError(
                f"metadata: expected str keys and values, got {key!r:.40}: {value!r:.40}"
            )
    order = sorted(named, key=lambda n: (-named[n].element_size(), n))
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for name in order:
        tensor = named[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    try:
        with open(path, "wb") as handle:
            handle.write(len(text).to_bytes(8, "little"))
            handle.write(text)
            for name in order:
                handle.write(_little_endian_bytes(named[name]))
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        raise type(error)(error.errno, error.strerror, str(path)) from None


def _little_endian_bytes(tensor: Tensor) -> bytes:
    """The bytes of ``tensor``'s elements in row-major order, each little-endian."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(_SAME_SIZE_INTS[flat.element_size()]).numpy()
    return raw.astype(raw.dtype.newbyteorder("<"), copy=False).tobytes()


def _finite(tensor: Tensor) -> bool:
    """Whether every element is finite: NaN propagates to the minimum and maximum, and an
    infinity is one of them (15x faster than ``isfinite().all()``, no tensor of flags)."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
