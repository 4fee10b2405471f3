"""What the sequence objectives share: framed token examples in token-budget batches, and the
label-smoothed cross-entropy (Vaswani et al. 2017, sec. 5.4) over the non-pad target tokens.

The examples are of either kind (:class:`~attnlab.data.examples.ExamplesProtocol`): in memory,
or memory-mapped shards of millions of pairs, which check their ids against the model from
their meta (their largest ids) and fingerprint themselves by their preparation keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...data.batching import TokenBatcher
from ...data.examples import ExamplesProtocol, as_examples
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

    def prepare(self, data: object, name: str) -> ExamplesProtocol:
        """``data`` as examples, checked against the model: a source where it reads one, and
        every id inside its vocabularies (the first example that is not, named)."""
        examples = as_examples(data, name)
        config = self.model_config
        if self.uses_source and (examples.src_lengths == 0).any():
            i = int(np.flatnonzero(examples.src_lengths == 0)[0])
            raise ValueError(f"{name}[{i}]: empty source; a Transformer needs a source sentence")
        src_vocab, tgt_vocab = config.vocab_size, config.target_vocab_size
        first_src = examples.first_id_from("src", src_vocab) if self.uses_source else None
        first_tgt = examples.first_id_from("tgt", tgt_vocab)
        if first_src is not None and (first_tgt is None or first_src <= first_tgt):
            raise ValueError(
                f"{name}[{first_src}]: source id {max(examples[first_src].src)} is outside the "
                f"model's vocabulary [0, {src_vocab})"
            )
        if first_tgt is not None:
            raise ValueError(
                f"{name}[{first_tgt}]: target id {max(examples[first_tgt].tgt)} is outside the "
                f"model's vocabulary [0, {tgt_vocab})"
            )
        return examples

    def batcher(self, data: ExamplesProtocol, name: str, **options: Any) -> TokenBatcher:
        try:
            return TokenBatcher.for_examples(data, self.config.max_tokens, **options)
        except ValueError as e:  # an example longer than the budget: say which set it is in
            raise ValueError(f"{name}: {e}") from None

    def collate(self, data: ExamplesProtocol, indices: Sequence[int]) -> Batch:
        return data.collate(indices, self.pad_id)

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

    def fingerprint(self, data: ExamplesProtocol) -> str:
        return data.fingerprint()
