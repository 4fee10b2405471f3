"""safetensors files, read with care and written with errors that name the file.

:func:`read_safetensors_header` checks a file from its header alone (its structure, that the
data is all there) before anything is allocated; :func:`read_safetensors` then reads the
tensors (each a copy in torch's own, aligned memory) and checks the floats finite;
:func:`save_safetensors` turns the library's errors into ones that name the file (a refused
write is the OSError of its errno).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

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
    tensors: dict[str, Tensor], path: str | os.PathLike[str], metadata: dict[str, str]
) -> None:
    """``safetensors.torch.save_file``, whose errors name ``path``: a refused write (a full
    disk, a file-size limit) is the OSError of its errno, anything else an OSError too."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, path, metadata=metadata)
    except SafetensorError as e:
        # The OS error inside, as "Os { code: 28, ... }" or "... (os error 27)".
        found = re.search(r"\bcode: (\d+)|\(os error (\d+)\)", str(e))
        if found is None:
            raise OSError(f"{path}: not written: {e}") from None
        code = int(found.group(1) or found.group(2))
        raise OSError(code, os.strerror(code), str(path)) from None


def _finite(tensor: Tensor) -> bool:
    """Whether every element is finite: NaN propagates to the minimum and maximum, and an
    infinity is one of them (15x faster than ``isfinite().all()``, no tensor of flags)."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
