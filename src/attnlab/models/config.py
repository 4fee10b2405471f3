"""The configuration of the Transformer models: one JSON-serialisable dataclass with presets.

* :class:`TransformerConfig`: the hyper-parameters of the encoder-decoder, decoder-only and
  encoder-only models (:mod:`attnlab.models.transformer`), with presets: the paper's base and big
  models (Vaswani et al. 2017, Table 3), small ones that train on a laptop CPU, and all-MiniLM-L6's
  BERT shape; every field is checked on construction.
* :class:`PresetConfig`: what the model families' config dataclasses share (presets, the
  per-head width, the dict form); :class:`attnlab.models.vision.VisionConfig` is one too.

A new model option is one field here, checked in ``validate``, read where it is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .._checks import check_bool, check_int, check_positive_number, check_rate, dataclass_from

#: The feed-forward network's activations (attnlab.nn.layers.ACTIVATIONS maps each to its
#: function): ReLU (the paper's), exact GELU (BERT, ViT), GELU's tanh approximation (GPT-2),
#: SiLU (Marian).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")

__all__ = ["ACTIVATIONS", "POSITIONAL_KINDS", "PresetConfig", "TransformerConfig"]

POSITIONAL_KINDS = ("sinusoidal", "learned", "rotary", "alibi", "none")
C = TypeVar("C", bound="PresetConfig")


class PresetConfig:
    """What the models' config dataclasses share: checked on construction, named presets, the
    per-head width, and a JSON-ready dict form.

    A subclass is a dataclass with a ``PRESETS`` table of ``name -> {field: value}``, the fields
    ``d_model`` and ``num_heads``, and a ``validate()`` that raises ValueError naming the field.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    d_model: int
    num_heads: int

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first field that is not valid (each family's own)."""
        raise NotImplementedError

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def preset(cls: type[C], name: str, **overrides: Any) -> C:
        """A named configuration (see :meth:`preset_names`), with fields replaced by
        ``overrides``, e.g. ``TransformerConfig.preset("small", positional="rotary")``."""
        if name not in cls.PRESETS:
            raise ValueError(f"preset: unknown name {name!r}; expected one of {cls.preset_names()}")
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"overrides: unknown config fields {unknown}")
        return cls(**{**cls.PRESETS[name], **overrides})

    @classmethod
    def preset_names(cls) -> list[str]:
        return list(cls.PRESETS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build from a mapping such as ``to_dict()``'s; unknown keys are an error."""
        return dataclass_from(cls, data, "config")


@dataclass
class TransformerConfig(PresetConfig):
    """Hyper-parameters of every attnlab model (defaults: the paper's base model, Table 3).

    Attributes:
        vocab_size: source vocabulary (the shared one when ``tgt_vocab_size`` is None; the
            paper's base model shares about 37,000 byte-pair tokens for English-German, sec. 5.1).
        tgt_vocab_size: target vocabulary of the encoder-decoder, when it differs.
        d_model, num_heads, d_ff: widths (sec. 3.2.2, 3.3); ``num_kv_heads`` for grouped-query.
        num_encoder_layers, num_decoder_layers: N of each stack (6 each in the paper). The
            decoder-only model uses the decoder's count, the encoder-only model the encoder's.
        dropout: residual and embedding dropout, P_drop (sec. 5.4).
        attention_dropout, activation_dropout: dropout on attention weights and inside the FFN
            (0 in the paper; torch.nn.Transformer and BERT use P_drop).
        activation: FFN activation, ``relu`` (paper), ``gelu``, ``gelu_tanh`` or ``silu``
            (swish, as the opus-mt models).
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_eps: LayerNorm epsilon.
        positional: ``sinusoidal`` (paper, sec. 3.5), ``learned``, ``rotary``, ``alibi``, or
            ``none`` (order-blind, the tutorial's T7).
        max_len: longest sequence; the size of a learned position table (other kinds can
            extrapolate and are not limited by it).
        share_embeddings: one embedding matrix for source and target (needs one vocabulary).
        tie_output: the pre-softmax projection shares the target embedding's weights (sec. 3.4).
        output_bias: a bias on the pre-softmax projection (the paper has none; Marian's
            ``final_logits_bias``).
        scale_embeddings: multiply embeddings by sqrt(d_model) (sec. 3.4).
        embedding_norm: a LayerNorm on the summed embeddings (BERT).
        type_vocab_size: token-type (segment) embeddings of the encoder-only model (BERT: 2).
        bias: biases in the linear projections.
        pad_id, bos_id, eos_id: special token ids. ``bos_id`` is the token the decoder starts
            from; Marian models start from the pad token (``bos_id == pad_id``), and then the
            decoder's first position is a real token, not padding (see
            :attr:`decoder_starts_from_pad`).
    """

    vocab_size: int = 37000
    tgt_vocab_size: int | None = None
    d_model: int = 512
    num_heads: int = 8
    num_kv_heads: int | None = None
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    positional: str = "sinusoidal"
    max_len: int = 1024
    share_embeddings: bool = True
    tie_output: bool = True
    output_bias: bool = False
    scale_embeddings: bool = True
    embedding_norm: bool = False
    type_vocab_size: int = 0
    bias: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        # Vaswani et al. 2017, Table 3, "base": 65M parameters.
        "paper-base": {},
        # Table 3, "big": 213M parameters; P_drop 0.3 (0.1 was used for English-French).
        "paper-big": {"d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3},
        # Trains on a CPU in minutes to hours (Multi30k); the model benchmark's dimensions.
        "small": {
            "vocab_size": 8000,
            "d_model": 256,
            "num_heads": 4,
            "d_ff": 1024,
            "num_encoder_layers": 3,
            "num_decoder_layers": 3,
            "max_len": 256,
        },
        # Seconds to train on the embedded `numbers` task; what the tests use.
        "tiny": {
            "vocab_size": 1000,
            "d_model": 64,
            "num_heads": 4,
            "d_ff": 256,
            "num_encoder_layers": 2,
            "num_decoder_layers": 2,
            "max_len": 128,
        },
        # The BERT shape of all-MiniLM-L6-v2 (for TransformerEncoder).
        "minilm-l6": {
            "vocab_size": 30522,
            "d_model": 384,
            "num_heads": 12,
            "d_ff": 1536,
            "num_encoder_layers": 6,
            "num_decoder_layers": 0,
            "attention_dropout": 0.1,
            "activation_dropout": 0.0,
            "activation": "gelu",
            "layer_norm_eps": 1e-12,
            "positional": "learned",
            "max_len": 512,
            "share_embeddings": False,
            "tie_output": False,
            "scale_embeddings": False,
            "embedding_norm": True,
            "type_vocab_size": 2,
        },
    }

    @property
    def decoder_starts_from_pad(self) -> bool:
        """True when the decoder starts from the pad token (Marian: ``bos_id == pad_id``). A
        target then never holds padding before a real token (targets are right-padded), so its
        pads are hidden by the look-ahead mask alone and the first position is not padding."""
        return self.bos_id == self.pad_id

    @property
    def target_vocab_size(self) -> int:
        """The decoder's vocabulary: ``tgt_vocab_size``, or the shared ``vocab_size``."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    def validate(self) -> None:
        """Raise ValueError (naming the field) unless the config describes a buildable model."""
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            check_int(getattr(self, name), name, minimum=1)
        for name in ("num_encoder_layers", "num_decoder_layers", "type_vocab_size"):
            check_int(getattr(self, name), name, minimum=0)
        for name in ("tgt_vocab_size", "num_kv_heads"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum=1)
        for name in ("pad_id", "bos_id", "eos_id"):
            check_int(getattr(self, name), name, minimum=0)
            for vocab in ("vocab_size", "tgt_vocab_size"):
                size = getattr(self, vocab)
                if size is not None and getattr(self, name) >= size:
                    raise ValueError(
                        f"{name}: {getattr(self, name)} is not a token id of {vocab}={size}"
                    )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_rate(getattr(self, name), name)
        for name in (
            "norm_first",
            "share_embeddings",
            "tie_output",
            "output_bias",
            "scale_embeddings",
            "embedding_norm",
            "bias",
        ):
            check_bool(getattr(self, name), name)
        check_positive_number(self.layer_norm_eps, "layer_norm_eps")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation: expected one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(
                f"positional: expected one of {list(POSITIONAL_KINDS)}, got {self.positional!r}"
            )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: {self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads: {self.num_kv_heads} does not divide num_heads={self.num_heads}"
            )
        if self.positional == "rotary" and self.head_dim % 2:
            raise ValueError(
                f"positional: rotary needs an even head dim, d_model / num_heads = {self.head_dim}"
            )
        if self.share_embeddings and self.tgt_vocab_size not in (None, self.vocab_size):
            raise ValueError(
                f"share_embeddings: needs one vocabulary, but vocab_size={self.vocab_size} and "
                f"tgt_vocab_size={self.tgt_vocab_size}; set share_embeddings=False"
            )
