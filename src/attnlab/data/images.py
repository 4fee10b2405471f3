"""Labelled images for the Vision Transformer: a data set, its batches, and the digits corpus.

* :class:`LabelledImages`: float images ``(N, C, H, W)`` with int64 labels ``(N,)``.
* :class:`ImageBatcher`: fixed-size batches of indices, reshuffled every epoch from
  ``(seed, epoch)``, each global batch split among the replicas of a distributed run (the same
  contract as :class:`attnlab.data.batching.TokenBatcher`, so the trainer treats both alike).
* :func:`digits`: scikit-learn's bundled handwritten digits (1,797 images of 8x8 pixels, 10
  classes, no download), split into stratified, seeded train / valid / test sets.
* :func:`random_affine`: random small rotations, scalings and shifts (the augmentation that
  keeps a small ViT from memorising 1,257 training digits).

Example::

    splits = digits(valid_size=180, test_size=360, seed=0)
    batcher = ImageBatcher(len(splits["train"]), batch_size=64, seed=0)
    for indices in batcher.batches(epoch=0):
        images, labels = splits["train"].batch(indices)
        logits = vit(images)                         # (B, 10) against labels (B,)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_bool, check_offset, check_positive_int, is_number, shape_of
from .batching import share

__all__ = ["DIGITS_CLASSES", "ImageBatcher", "LabelledImages", "digits", "random_affine"]

DIGITS_CLASSES = tuple(str(d) for d in range(10))


class LabelledImages:
    """Images and their class labels.

    Args:
        images: float tensor ``(N, C, H, W)``; finite.
        labels: int tensor ``(N,)`` of class indices in ``[0, num_classes)``.
        classes: the class names (``len(classes) == num_classes``).
    """

    def __init__(self, images: Tensor, labels: Tensor, classes: Sequence[str]) -> None:
        if not isinstance(images, Tensor) or images.dim() != 4 or not images.is_floating_point():
            raise ValueError(
                f"images: expected a float tensor (N, C, H, W), got {shape_of(images)}"
                + (f" of {images.dtype}" if isinstance(images, Tensor) else "")
            )
        if not bool(torch.isfinite(images).all()):
            raise ValueError("images: holds NaN or infinite values")
        if (
            not isinstance(labels, Tensor)
            or labels.dim() != 1
            or labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8)
        ):
            raise ValueError(f"labels: expected an int tensor (N,), got {shape_of(labels)}")
        if len(labels) != len(images):
            raise ValueError(
                f"labels: {len(labels)} labels for {len(images)} images; expected one per image"
            )
        classes = tuple(str(c) for c in classes)
        if not classes:
            raise ValueError("classes: expected at least one class name")
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= len(classes)):
            raise ValueError(
                f"labels: values must lie in [0, {len(classes)}) (one per class), got "
                f"[{int(labels.min())}, {int(labels.max())}]"
            )
        self.images = images.contiguous()
        self.labels = labels.to(torch.int64)
        self.classes = classes

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        n, c, h, w = self.images.shape
        return f"LabelledImages({n} images, {c}x{h}x{w}, {len(self.classes)} classes)"

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)``."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """``(images (B, C, H, W), labels (B,))`` of ``indices``, in their order."""
        if len(indices) == 0:
            raise ValueError("indices: expected at least one image index, got none")
        index = torch.as_tensor(list(indices), dtype=torch.int64)
        return self.images[index], self.labels[index]

    def fingerprint(self) -> str:
        """A short hash of the images and labels (a resumed run checks it has the same data)."""
        digest = hashlib.sha256()
        digest.update(str(tuple(self.images.shape)).encode())
        digest.update(self.images.detach().cpu().float().numpy().tobytes())
        digest.update(self.labels.cpu().numpy().tobytes())
        return digest.hexdigest()[:16]


class ImageBatcher:
    """Batches of ``batch_size`` indices over ``n`` images (the last one of an epoch may be
    smaller), in a new order each epoch drawn from ``(seed, epoch)``; with ``shuffle=False``
    the order is ``0..n-1`` every epoch.

    Distributed: with ``num_replicas > 1`` each global batch is cut into contiguous shares
    (sizes differ by at most one) and :meth:`batches` returns this ``rank``'s; every replica
    gets the same number of batches.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        check_positive_int(n, "n")
        check_positive_int(batch_size, "batch_size")
        check_bool(shuffle, "shuffle")
        check_offset(seed, "seed")
        check_positive_int(num_replicas, "num_replicas")
        check_offset(rank, "rank")
        if rank >= num_replicas:
            raise ValueError(f"rank: expected 0 <= rank < num_replicas={num_replicas}, got {rank}")
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank

    def __len__(self) -> int:
        return self.n

    def global_batches(self, epoch: int) -> list[list[int]]:
        """Every replica's batches of ``epoch`` together."""
        check_offset(epoch, "epoch")
        if self.shuffle:
            order = np.random.default_rng((self.seed, epoch)).permutation(self.n).tolist()
        else:
            order = list(range(self.n))
        return [order[i : i + self.batch_size] for i in range(0, self.n, self.batch_size)]

    def batches(self, epoch: int) -> list[list[int]]:
        """This replica's batches of ``epoch`` (shares of the global ones; possibly empty)."""
        batches = self.global_batches(epoch)
        if self.num_replicas == 1:
            return batches
        return [self.share(b) for b in batches]

    def share(self, batch: Sequence[int]) -> list[int]:
        """This rank's contiguous share of a global ``batch`` (``numpy.array_split``'s cut)."""
        return share(batch, self.num_replicas, self.rank)

    def num_batches(self, epoch: int) -> int:
        """The number of (global) batches in an epoch."""
        check_offset(epoch, "epoch")
        return -(-self.n // self.batch_size)


def random_affine(
    images: Tensor,
    *,
    rotation: float = 12.0,
    scale: float = 0.1,
    shift: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Each image turned, scaled and moved by its own random amounts, resampled bilinearly
    (what comes in from outside the frame is 0, the digits' background): the angle uniform in
    ``[-rotation, rotation]`` degrees, the size factor in ``[1 - scale, 1 + scale]``, the
    offset in ``[-shift, shift]`` pixels along each axis. Draws from ``generator`` (default:
    torch's global generator, which a checkpoint saves and a resume restores)."""
    if not isinstance(images, Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise ValueError(f"images: expected a float tensor (B, C, H, W), got {shape_of(images)}")
    for name, value, limit in (("rotation", rotation, 180.0), ("scale", scale, 1.0)):
        if not is_number(value):
            raise ValueError(f"{name}: expected a number, got {value!r}")
        if not 0 <= value < limit:
            raise ValueError(f"{name}: expected a number in [0, {limit:g}), got {value!r}")
    b, _, h, w = images.shape
    if not is_number(shift):
        raise ValueError(f"shift: expected a number, got {shift!r}")
    if not 0 <= shift < min(h, w):
        raise ValueError(f"shift: expected a number in [0, {min(h, w)}) pixels, got {shift!r}")

    def uniform(*shape: int) -> Tensor:
        return torch.rand(*shape, generator=generator) * 2 - 1

    angle = uniform(b) * math.radians(rotation)
    size = 1 + uniform(b) * scale
    offset = uniform(b, 2) * shift * 2 / torch.tensor([w, h])  # pixels -> [-1, 1] coordinates
    cos, sin = torch.cos(angle) / size, torch.sin(angle) / size
    theta = torch.stack(
        [torch.stack([cos, -sin, offset[:, 0]], 1), torch.stack([sin, cos, offset[:, 1]], 1)], 1
    ).to(images)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, align_corners=False, padding_mode="zeros")


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """``(images (1797, 8, 8) uint8 in 0..16, labels (1797,) uint8)`` of the shipped digits
    (``attnlab/data/digits.npz``; DIGITS.txt beside it says where they come from)."""
    from importlib.resources import files

    with files("attnlab.data").joinpath("digits.npz").open("rb") as handle, np.load(handle) as data:
        return data["images"], data["target"]


def digits(
    *, valid_size: int = 180, test_size: int = 360, seed: int = 0
) -> dict[str, LabelledImages]:
    """The handwritten digits (UCI optdigits test set: 1,797 8x8 grey images of 0-9, the array
    of scikit-learn's ``load_digits``, shipped in ``attnlab/data/digits.npz``, no download) as
    ``{"train", "valid", "test"}``.

    Pixels (0-16 in the source) are scaled to ``[0, 1]``, one channel: ``(N, 1, 8, 8)``. The
    held-out sets are stratified (each class in proportion) and drawn from ``seed`` alone, so
    they do not depend on how a model is trained; the three sets are disjoint and cover every
    image.
    """
    check_offset(valid_size, "valid_size")
    check_offset(test_size, "test_size")
    check_offset(seed, "seed")
    pixels, target = load_digits_arrays()
    images = torch.from_numpy(pixels.astype(np.float32) / 16.0).unsqueeze(1)
    labels = torch.from_numpy(target.astype(np.int64))
    n = len(labels)
    if valid_size + test_size >= n:
        raise ValueError(
            f"valid_size, test_size: {valid_size} + {test_size} leave no training image of {n}"
        )
    rng = np.random.default_rng(seed)
    # Stratified: shuffle each class, then deal its images out in proportion.
    per_class = [rng.permutation(np.flatnonzero(target == c)) for c in range(10)]
    held = {"test": test_size, "valid": valid_size}
    chosen: dict[str, list[int]] = {"test": [], "valid": [], "train": []}
    taken = [0] * 10
    for split, size in held.items():
        # Largest-remainder apportionment of `size` over the classes.
        exact = [size * len(idx) / n for idx in per_class]
        counts = [int(x) for x in exact]
        for c in sorted(range(10), key=lambda c: exact[c] - counts[c], reverse=True)[
            : size - sum(counts)
        ]:
            counts[c] += 1
        for c, idx in enumerate(per_class):
            chosen[split] += idx[taken[c] : taken[c] + counts[c]].tolist()
            taken[c] += counts[c]
    for c, idx in enumerate(per_class):
        chosen["train"] += idx[taken[c] :].tolist()
    out = {}
    for split in ("train", "valid", "test"):
        index = torch.as_tensor(sorted(chosen[split]), dtype=torch.int64)
        out[split] = LabelledImages(images[index], labels[index], DIGITS_CLASSES)
    return out
