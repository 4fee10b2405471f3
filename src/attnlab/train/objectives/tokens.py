"""What the sequence objectives share: framed token examples in token-budget batches, and the
label-smoothed cross-entropy (Vaswani et al. 2017, sec. 5.4) over the non-pad target tokens.

The examples are in memory (:class:`~attnlab.data.batching.Examples`) or memory-mapped
shards (:class:`~attnlab.data.shards.ShardExamples`, millions of pairs): for those, checking
them against the model reads the shards' meta (their largest ids) and the lengths, not each
example, and the data fingerprint is their preparation keys, not a hash of every length."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...data.batching import Examples, TokenBatcher, collate
from ...data.shards import ShardExamples
from ..config import TrainConfig
from ..losses import cross_entropy
from ..metrics import METRICS_COLUMNS
from .base import Batch, autocast

__all__ = ["TokenObjective"]


class TokenObjective:
    """The loss of a model that maps token ids to next-token logits ``(B, T, V)``, summed over
    the non-pad target tokens. A subclass says how the model is called (:meth:`logits`) and
    whether it reads the sources (``uses_source``)."""

    model_class: ClassVar[type[nn.Module]]
    uses_source: ClassVar[bool]
    unit: ClassVar[str] = "tokens"
    columns: ClassVar[tuple[str, ...]] = METRICS_COLUMNS
    rate_unit: ClassVar[str] = "tok/s"
    validation_counts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: nn.Module, config: TrainConfig, device: torch.device) -> None:
        self.model_config: Any = model.config
        self.config = config
        self.device = device
        self.pad_id: int = self.model_config.pad_id

    def logits(self, module: nn.Module, src: Tensor, tgt_in: Tensor) -> Tensor:
        """``(B, T, V)`` logits of the target inputs (and, if the model reads it, the source)."""
        raise NotImplementedError

    def prepare(self, data: object, name: str) -> Examples:
        examples = _as_examples(data, name)
        config = self.model_config
        if self.uses_source and (examples.src_lengths == 0).any():
            i = int(np.flatnonzero(examples.src_lengths == 0)[0])
            raise ValueError(f"{name}[{i}]: empty source; a Transformer needs a source sentence")
        src_vocab, tgt_vocab = config.vocab_size, config.target_vocab_size
        if isinstance(examples, ShardExamples):
            self._check_shard_ids(examples, name, src_vocab, tgt_vocab)
            return examples
        for i, example in enumerate(examples):
            if example.src and self.uses_source and max(example.src) >= src_vocab:
                raise ValueError(
                    f"{name}[{i}]: source id {max(example.src)} is outside the model's "
                    f"vocabulary [0, {src_vocab})"
                )
            if max(example.tgt) >= tgt_vocab:
                raise ValueError(
                    f"{name}[{i}]: target id {max(example.tgt)} is outside the model's "
                    f"vocabulary [0, {tgt_vocab})"
                )
        return examples

    def _check_shard_ids(
        self, examples: ShardExamples, name: str, src_vocab: int, tgt_vocab: int
    ) -> None:
        """The in-memory check's error, for the same first example, found from the shards'
        largest ids (their ids are read only when an id is out of range)."""
        first_src = None
        if self.uses_source and not examples.lm:
            first_src = examples.first_id_from("src", src_vocab)
        framing = max(examples.bos_id, examples.eos_id) >= tgt_vocab and len(examples) > 0
        first_tgt = 0 if framing else examples.first_id_from("tgt", tgt_vocab)
        if first_src is not None and (first_tgt is None or first_src <= first_tgt):
            source = examples[first_src].src
            raise ValueError(
                f"{name}[{first_src}]: source id {max(source)} is outside the model's "
                f"vocabulary [0, {src_vocab})"
            )
        if first_tgt is not None:
            target = examples[first_tgt].tgt
            raise ValueError(
                f"{name}[{first_tgt}]: target id {max(target)} is outside the model's "
                f"vocabulary [0, {tgt_vocab})"
            )

    def batcher(self, data: Examples, name: str, **options: Any) -> TokenBatcher:
        try:
            return TokenBatcher.for_examples(data, self.config.max_tokens, **options)
        except ValueError as e:  # an example longer than the budget: say which set it is in
            raise ValueError(f"{name}: {e}") from None

    def collate(self, data: Examples, indices: Sequence[int]) -> Batch:
        return collate(data, indices, self.pad_id)

    def count(self, batch: Batch) -> int:
        return int((batch[2] != self.pad_id).sum())

    def loss(self, module: nn.Module, batch: Batch) -> Tensor:
        src, tgt_in, tgt_out = (t.to(self.device, non_blocking=True) for t in batch)
        with autocast(self.device, self.config):
            logits = self.logits(module, src, tgt_in)  # (B, T, V)
        flat, target = logits.float().flatten(0, 1), tgt_out.flatten()  # (B * T, V), (B * T,)
        smoothing = self.config.label_smoothing
        if flat.requires_grad:  # training: the fused loss, over the logits (attnlab.train.losses)
            return cross_entropy(
                flat, target, ignore_index=self.pad_id, label_smoothing=smoothing, inplace=True
            )
        return F.cross_entropy(
            flat, target, ignore_index=self.pad_id, label_smoothing=smoothing, reduction="sum"
        )

    def evaluate_batch(self, module: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, int]]:
        return self.loss(module, batch), {}

    def validation_metrics(self, sums: Mapping[str, float], count: float) -> dict[str, float]:
        return {}

    def dummy_loss(self, module: nn.Module) -> Tensor:
        bos = torch.full((1, 1), self.model_config.bos_id, device=self.device)
        with autocast(self.device, self.config):
            logits = self.logits(module, bos, bos)
        return logits.float().sum() * 0.0

    def fingerprint(self, data: Examples) -> str:
        if isinstance(data, ShardExamples):  # their preparation keys, max_len, framing, mixture
            return data.fingerprint()
        digest = hashlib.sha256()
        digest.update(data.src_lengths.tobytes())
        digest.update(data.tgt_lengths.tobytes())
        return digest.hexdigest()[:16]


def _as_examples(examples: object, name: str) -> Examples:
    if isinstance(examples, Examples):
        return examples
    if isinstance(examples, Sequence) and not isinstance(examples, (str, bytes)):
        try:
            return Examples(examples)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}: {e}") from None
    raise TypeError(f"{name}: expected Examples (make_examples), got {type(examples).__name__}")
