"""The models: encoder-decoder, decoder-only and encoder-only Transformers, with their config.

* :class:`TransformerConfig`: one JSON-serialisable dataclass for all three, with presets:
  the paper's base and big models (Vaswani et al. 2017, Table 3), small ones that train on a
  laptop CPU, and all-MiniLM-L6's BERT shape.
* :class:`Transformer`: the paper's encoder-decoder (sec. 3, figure 1) for translation.
* :class:`TransformerLM`: decoder-only, causal (the decoder without cross-attention).
* :class:`TransformerEncoder`: BERT-style encoder with token types and mean pooling; loads real
  BERT checkpoints with :meth:`TransformerEncoder.from_bert`.
* :func:`count_parameters`: the analytic parameter count of a config.

Models save with ``save_pretrained(dir)`` (``config.json`` + ``model.safetensors``, no pickle)
and load with ``Model.from_pretrained(dir)`` or :func:`load_pretrained`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import PresetConfig, check_positive_number, check_rate, shape_of
from ._io import atomic_write
from ._ops import dropout
from .layers import ACTIVATIONS, Decoder, DecoderCache, Encoder
from .masks import key_mask
from .positional import (
    ALiBi,
    AttentionPositional,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "AttentionMaps",
    "Transformer",
    "TransformerConfig",
    "TransformerEncoder",
    "TransformerLM",
    "count_parameters",
    "load_pretrained",
]

POSITIONAL_KINDS = ("sinusoidal", "learned", "rotary", "alibi", "none")
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


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
        activation: FFN activation, ``relu`` (paper), ``gelu`` or ``gelu_tanh``.
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_eps: LayerNorm epsilon.
        positional: ``sinusoidal`` (paper, sec. 3.5), ``learned``, ``rotary``, ``alibi``, or
            ``none`` (order-blind, the tutorial's T7).
        max_len: longest sequence; the size of a learned position table (other kinds can
            extrapolate and are not limited by it).
        share_embeddings: one embedding matrix for source and target (needs one vocabulary).
        tie_output: the pre-softmax projection shares the target embedding's weights (sec. 3.4).
        scale_embeddings: multiply embeddings by sqrt(d_model) (sec. 3.4).
        embedding_norm: a LayerNorm on the summed embeddings (BERT).
        type_vocab_size: token-type (segment) embeddings of the encoder-only model (BERT: 2).
        bias: biases in the linear projections.
        pad_id, bos_id, eos_id: special token ids.
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
    def target_vocab_size(self) -> int:
        """The decoder's vocabulary: ``tgt_vocab_size``, or the shared ``vocab_size``."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    def validate(self) -> None:
        """Raise ValueError (naming the field) unless the config describes a buildable model."""
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            _check_int(self, name, minimum=1)
        for name in ("num_encoder_layers", "num_decoder_layers", "type_vocab_size"):
            _check_int(self, name, minimum=0)
        for name in ("tgt_vocab_size", "num_kv_heads"):
            if getattr(self, name) is not None:
                _check_int(self, name, minimum=1)
        for name in ("pad_id", "bos_id", "eos_id"):
            _check_int(self, name, minimum=0)
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
            "scale_embeddings",
            "embedding_norm",
            "bias",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")
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


def _check_int(config: TransformerConfig, name: str, *, minimum: int) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}: expected a {kind} int, got {value!r}")


# -- parameter count ---------------------------------------------------------------------------


def count_parameters(config: TransformerConfig, model_type: str = "transformer") -> int:
    """The number of parameters of a model built from ``config``, computed from the shapes.

    Args:
        config: the configuration.
        model_type: ``"transformer"`` (encoder-decoder), ``"lm"`` or ``"encoder"``; or a
            registered model of another config family, such as ``"vit"``
            (:class:`attnlab.vision.VisionConfig`), whose config counts itself.

    Equals ``sum(p.numel() for p in model.parameters())`` (tied weights counted once). The
    paper's base model has 65M at its 37,000-token vocabulary, and this count gives 63.1M: the
    paper's figure is rounded, and the exact vocabulary and bias use are not stated.
    """
    _check_model_type(model_type)
    cls = _MODEL_TYPES[model_type]
    if cls.config_class is not TransformerConfig:  # another family (e.g. "vit") counts itself
        if not isinstance(config, cls.config_class):
            raise TypeError(
                f"config: expected a {cls.config_class.__name__} for model_type={model_type!r}, "
                f"got {type(config).__name__}"
            )
        return config.num_parameters()
    _check_config(config, cls)
    d, d_ff = config.d_model, config.d_ff
    bias = int(config.bias)
    kv = (config.num_kv_heads or config.num_heads) * config.head_dim
    attention = d * (d + 2 * kv) + bias * (d + 2 * kv) + d * d + bias * d
    ffn = 2 * d * d_ff + bias * (d_ff + d)
    norm = 2 * d
    final_norm = norm if config.norm_first else 0

    def embeddings(vocab: int, token_types: int = 0) -> int:
        positions = config.max_len * d if config.positional == "learned" else 0
        return vocab * d + positions + token_types * d + (norm if config.embedding_norm else 0)

    if model_type == "encoder":
        layers = config.num_encoder_layers * (attention + ffn + 2 * norm)
        return embeddings(config.vocab_size, config.type_vocab_size) + layers + final_norm
    if model_type == "lm":
        head = 0 if config.tie_output else config.vocab_size * d
        layers = config.num_decoder_layers * (attention + ffn + 2 * norm)
        return embeddings(config.vocab_size) + layers + final_norm + head
    target = config.target_vocab_size
    head = 0 if config.tie_output else target * d
    source = embeddings(config.vocab_size)
    tgt = embeddings(target)
    if config.share_embeddings:  # the token matrix is counted once
        tgt -= target * d
    encoder = config.num_encoder_layers * (attention + ffn + 2 * norm) + final_norm
    decoder = config.num_decoder_layers * (2 * attention + ffn + 3 * norm) + final_norm
    return source + tgt + encoder + decoder + head


# -- building blocks ---------------------------------------------------------------------------


class Embeddings(nn.Module):
    """Token embedding (x sqrt(d_model), sec. 3.4) + positional encoding (sec. 3.5) [+ token
    type] -> [LayerNorm] -> dropout (sec. 5.4).

    Shape: ``forward(ids (B, T)) -> (B, T, d_model)``.
    """

    def __init__(
        self,
        config: TransformerConfig,
        vocab_size: int,
        *,
        token: nn.Embedding | None = None,
        token_types: int = 0,
        name: str = "ids",
    ) -> None:
        super().__init__()
        d = config.d_model
        self.name = name
        self.vocab_size = vocab_size
        self.token = token if token is not None else nn.Embedding(vocab_size, d)
        self.scale = math.sqrt(d) if config.scale_embeddings else 1.0
        self.position: nn.Module | None = None
        if config.positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d)
        elif config.positional == "learned":
            self.position = LearnedPositionalEmbedding(config.max_len, d)
        self.token_type = nn.Embedding(token_types, d) if token_types else None
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.embedding_norm else None
        self.dropout = config.dropout

    def forward(
        self,
        ids: Tensor,
        *,
        offset: int = 0,
        positions: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """``ids`` ``(B, T)`` at positions ``offset ..``, or at ``positions`` ``(B, T)`` (int64)
        when rows differ (left-padded decoder input)."""
        check_ids(ids, self.vocab_size, self.name)
        return self._embed(ids, offset, positions, token_type_ids)

    def _embed(
        self, ids: Tensor, offset: int, positions: Tensor | None, token_type_ids: Tensor | None
    ) -> Tensor:
        """:meth:`forward` for ids already checked."""
        x = self.token(ids)  # (B, T, d_model)
        if self.scale != 1.0:
            x = x * self.scale
        if self.position is not None:
            if positions is None:
                x = self.position(x, offset=offset)
            else:
                x = x + self._position_table(positions, x.dtype)
        if self.token_type is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            elif token_type_ids.shape != ids.shape:
                raise ValueError(
                    f"token_type_ids: expected shape {tuple(ids.shape)} like {self.name}, got "
                    f"{tuple(token_type_ids.shape)}"
                )
            check_ids(token_type_ids, self.token_type.num_embeddings, "token_type_ids")
            x = x + self.token_type(token_type_ids)
        elif token_type_ids is not None:
            raise ValueError("token_type_ids: this model has no token types (type_vocab_size=0)")
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout, self.training)

    def _position_table(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """The encodings of ``positions`` ``(B, T)``: ``(B, T, d_model)``."""
        length = int(positions.max()) + 1
        if isinstance(self.position, SinusoidalPositionalEncoding):
            table = self.position.table(length, dtype=dtype).to(positions.device)
        else:
            table = self.position.table(length)  # checks max_len
        return table[positions]


def _decoder_input(
    embed: Embeddings, ids: Tensor, pad_id: int, cache: DecoderCache | None
) -> tuple[Tensor, Tensor | None]:
    """Embed decoder ids (checked by the caller); return them with the self-attention key mask
    (None when no pad precedes a real token: the look-ahead mask then hides every pad from
    every real token).

    Positions count real tokens only, so a left-padded row is encoded as it would be without
    its padding (for RoPE and ALiBi, which see relative positions, that holds by itself). With
    a ``cache`` the ids continue its positions and the cache remembers which are pads.
    """
    real = ids != pad_id
    if cache is None:
        self_mask = _causal_key_mask(ids, pad_id)
        if self_mask is None:
            return embed._embed(ids, 0, None, None), None
        return embed._embed(ids, 0, _real_positions(real, None), None), self_mask
    before = cache.real.sum(dim=1) if cache.real is not None else None
    length = cache.length
    flags = cache.track_padding(real)
    if flags is None:
        return embed._embed(ids, length, None, None), None
    if before is None:
        before = torch.full((ids.shape[0],), length, dtype=torch.long, device=ids.device)
    return embed._embed(ids, 0, _real_positions(real, before), None), key_mask(flags)


def _real_positions(real: Tensor, before: Tensor | None) -> Tensor:
    """Position of each slot of ``real`` ``(B, T)``: the real tokens before it in its row (plus
    ``before`` ``(B,)``); a pad shares the position of the next real token."""
    flags = real.long()
    positions = flags.cumsum(dim=1) - flags
    return positions if before is None else positions + before[:, None]


def check_ids(ids: object, vocab_size: int, name: str) -> None:
    """Raise unless ``ids`` is a non-empty ``(B, T)`` integer tensor of ids below ``vocab_size``."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name}: expected a (B, T) integer tensor, got {type(ids).__name__}")
    if ids.dim() != 2:
        raise ValueError(f"{name}: expected shape (B, T), got {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer dtype, got {ids.dtype}")
    if ids.numel() == 0:
        raise ValueError(f"{name}: empty batch or sequence, shape {tuple(ids.shape)}")
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one pass, one sync
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size})")


def _attention_positional(config: TransformerConfig) -> AttentionPositional | None:
    if config.positional == "rotary":
        return RotaryEmbedding(config.head_dim)
    if config.positional == "alibi":
        return ALiBi(config.num_heads)
    return None


def _layer_options(config: TransformerConfig) -> dict[str, Any]:
    return {
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "activation": config.activation,
        "norm_first": config.norm_first,
        "layer_norm_eps": config.layer_norm_eps,
        "bias": config.bias,
        "num_kv_heads": config.num_kv_heads,
        "positional": _attention_positional(config),
    }


def _key_mask_or_none(real: Tensor) -> Tensor | None:
    """``(B, 1, 1, T)`` key mask of the real tokens ``real`` ``(B, T)``, or None when nothing is
    padded (so that attention keeps its unmasked fast path)."""
    return None if bool(real.all()) else key_mask(real)


def _causal_key_mask(ids: Tensor, pad_id: int) -> Tensor | None:
    """Key mask for causal self-attention: None when the look-ahead mask already hides every
    pad from every real token, i.e. when pads only trail (right padding) or are absent; then
    attention keeps its causal fast path. Pad positions' own outputs are never used."""
    real = ids != pad_id
    pad_before_real = (~real[:, :-1] & real[:, 1:]).any()
    return key_mask(real) if bool(pad_before_real) else None


def _check_same_batch(src_ids: Tensor, tgt_ids: object) -> None:
    if isinstance(tgt_ids, Tensor) and tgt_ids.dim() == 2 and tgt_ids.shape[0] != src_ids.shape[0]:
        raise ValueError(
            f"tgt_ids: batch size {tgt_ids.shape[0]} differs from src_ids' {src_ids.shape[0]} "
            f"(src_ids {tuple(src_ids.shape)}, tgt_ids {tuple(tgt_ids.shape)})"
        )


@dataclass
class AttentionMaps:
    """Attention weights of every layer, each ``(B, H, T_q, T_k)`` (lists indexed by layer).

    ``encoder``: encoder self-attention; ``decoder``: decoder (masked) self-attention;
    ``cross``: decoder-to-encoder attention. Lists a model does not have are empty.
    """

    encoder: list[Tensor] = field(default_factory=list)
    decoder: list[Tensor] = field(default_factory=list)
    cross: list[Tensor] = field(default_factory=list)


# -- save / load -------------------------------------------------------------------------------


def _check_model_type(model_type: object) -> None:
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"model_type: expected one of {list(_MODEL_TYPES)}, got {model_type!r}")


def _unique_state(module: nn.Module) -> dict[str, Tensor]:
    """The state dict with each tied tensor once (its first name): safetensors stores no
    aliases, and the model re-ties on construction."""
    state: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        state[name] = tensor.detach()
    return state


def read_config(directory: str | os.PathLike) -> tuple[str, Any]:
    """Read ``config.json`` of a saved model: ``(model_type, config)``, the config an instance of
    the model class's ``config_class``; errors name the file."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (save_pretrained writes it)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    model_type = data.pop("model_type", None)
    data.pop("attnlab_version", None)
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"{path}: model_type: expected one of {list(_MODEL_TYPES)}, got {model_type!r}"
        )
    try:
        return model_type, _MODEL_TYPES[model_type].config_class.from_dict(data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``model.safetensors`` into ``model``, checking every key and shape."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (save_pretrained writes it)")
    try:
        stored = load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable safetensors file (truncated?): {e}") from None
    dtypes = {t.dtype for t in stored.values() if t.dtype.is_floating_point}
    if len(dtypes) == 1:  # build in the precision it was saved in (a float64 model stays one)
        model.to(dtypes.pop())
    expected = _unique_state(model)
    missing = [k for k in expected if k not in stored]
    unknown = [k for k in stored if k not in expected]
    if missing:
        raise ValueError(
            f"{path}: missing weights {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    if unknown:
        raise ValueError(
            f"{path}: unknown weights {unknown[:5]}{' ...' if len(unknown) > 5 else ''} "
            f"(saved by another model or config?)"
        )
    for name, tensor in stored.items():
        target = expected[name]
        if tensor.shape != target.shape:
            raise ValueError(
                f"{path}: {name}: shape {tuple(tensor.shape)} does not match the config's "
                f"{tuple(target.shape)}"
            )
        if target.dtype.is_floating_point and not tensor.dtype.is_floating_point:
            raise ValueError(f"{path}: {name}: dtype {tensor.dtype}, expected a floating dtype")
    with torch.no_grad():
        for name, tensor in stored.items():
            expected[name].copy_(tensor)


class _Pretrained(nn.Module):
    """save_pretrained / from_pretrained, shared by the models.

    A model class names its ``model_type`` (the key of ``_MODEL_TYPES`` and of ``config.json``)
    and its ``config_class``: a dataclass with ``to_dict()`` and ``from_dict()``.
    """

    model_type: ClassVar[str]
    config_class: ClassVar[type] = TransformerConfig
    uses_layers: ClassVar[tuple[str, ...]]  # the config's layer counts the model builds
    config: TransformerConfig

    def num_parameters(self) -> int:
        """Parameters, tied ones counted once (equals :func:`count_parameters`)."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if
        needed). Each file is written to a temporary name and renamed, so a crash never leaves
        a half-written file under the real name. Returns the directory."""
        from safetensors.torch import save_file

        from . import __version__

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous().cpu() for k, v in _unique_state(self).items()}
        metadata = {"format": "pt", "model_type": self.model_type}
        atomic_write(directory / WEIGHTS_FILE, lambda p: save_file(state, p, metadata=metadata))
        config = {"model_type": self.model_type, "attnlab_version": __version__}
        config.update(self.config.to_dict())
        text = json.dumps(config, indent=2) + "\n"
        atomic_write(directory / CONFIG_FILE, lambda p: Path(p).write_text(text, encoding="utf-8"))
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        *,
        device: torch.device | str | None = None,
    ) -> _Pretrained:
        """Load a model written by :meth:`save_pretrained`, in eval mode, in the precision its
        weights were saved in, on ``device`` (default CPU).

        Errors name the file and, for weights, the key: a missing or truncated file, another
        model type, unknown or missing weights, wrong shapes.
        """
        model_type, config = read_config(directory)
        if model_type != cls.model_type:
            raise ValueError(
                f"{Path(directory) / CONFIG_FILE}: holds a {model_type!r} model "
                f"({_MODEL_TYPES[model_type].__name__}), not {cls.model_type!r} ({cls.__name__}); "
                f"use attnlab.load_pretrained to load any model"
            )
        model = cls(config)
        load_weights(model, Path(directory) / WEIGHTS_FILE)
        if device is not None:
            model = model.to(device)
        return model.eval()

    def _init_weights(self) -> None:
        """Xavier-uniform linear weights (as torch.nn.Transformer), embeddings
        N(0, d_model^-1/2) when scaled by sqrt(d_model) (unit variance after scaling) else
        N(0, 0.02^2) (BERT)."""
        std = self.config.d_model**-0.5 if self.config.scale_embeddings else 0.02
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, LearnedPositionalEmbedding):
                nn.init.normal_(module.weight, std=0.02)


def _check_config(config: object, cls: type[_Pretrained]) -> TransformerConfig:
    """Validate ``config`` for building ``cls``: the layers it uses exist, and a single-stack
    model has one vocabulary."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config: expected a TransformerConfig, got {type(config).__name__}")
    config.validate()
    for name in cls.uses_layers:
        if getattr(config, name) < 1:
            raise ValueError(f"{name}: {cls.__name__} needs at least one layer, got 0")
    if cls.model_type != "transformer" and config.tgt_vocab_size not in (None, config.vocab_size):
        raise ValueError(
            f"tgt_vocab_size: {cls.__name__} has one vocabulary (vocab_size={config.vocab_size}); "
            f"leave tgt_vocab_size None, got {config.tgt_vocab_size}"
        )
    return config


class Transformer(_Pretrained):
    """The encoder-decoder Transformer (Vaswani et al. 2017, sec. 3, figure 1).

    ``src_ids -> Embeddings -> Encoder -> memory``; ``tgt_ids -> Embeddings -> Decoder(memory)
    -> linear -> logits``. Padding masks come from ``config.pad_id``; the decoder is causal.
    With ``share_embeddings`` and ``tie_output`` (the paper, sec. 3.4), the source and target
    embeddings and the pre-softmax projection are one matrix.

    Shape: ``forward(src_ids (B, S), tgt_ids (B, T)) -> logits (B, T, target vocab)``.

    Example::

        model = Transformer(TransformerConfig.preset("small"))
        logits = model(src_ids, tgt_ids[:, :-1])       # teacher forcing
        memory = model.encode(src_ids)                 # (B, S, d_model)
    """

    model_type = "transformer"
    uses_layers = ("num_encoder_layers", "num_decoder_layers")

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = _check_config(config, type(self))
        c = config
        options = _layer_options(c)
        self.src_embed = Embeddings(c, c.vocab_size, name="src_ids")
        shared = self.src_embed.token if c.share_embeddings else None
        self.tgt_embed = Embeddings(c, c.target_vocab_size, token=shared, name="tgt_ids")
        self.encoder = Encoder(c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, **options)
        self.decoder = Decoder(c.num_decoder_layers, c.d_model, c.num_heads, c.d_ff, **options)
        self.lm_head = nn.Linear(c.d_model, c.target_vocab_size, bias=False)
        self._init_weights()
        if c.tie_output:
            self.lm_head.weight = self.tgt_embed.token.weight

    def source_mask(self, src_ids: Tensor) -> Tensor | None:
        """``(B, 1, 1, S)`` key mask of the source's non-pad tokens, or None without padding."""
        return _key_mask_or_none(src_ids != self.config.pad_id)

    def encode(self, src_ids: Tensor) -> Tensor:
        """The encoder's output ("memory") ``(B, S, d_model)`` for source ids ``(B, S)``."""
        memory, _, _ = self._encode(src_ids, need_weights=False)
        return memory

    def _encode(
        self, src_ids: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, list[Tensor] | None]:
        """``(memory, source key mask, encoder weights)``."""
        x = self.src_embed(src_ids)  # checks src_ids
        mask = self.source_mask(src_ids)
        memory, weights = self.encoder(x, mask=mask, need_weights=need_weights)
        return memory, mask, weights

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Logits ``(B, T, target vocab)`` for target ids ``(B, T)`` given the memory.

        ``memory_mask`` is the source's key mask (:meth:`source_mask`). Padded target tokens are
        masked as keys of the decoder's self-attention (trailing pads are already hidden from
        every real token by the look-ahead mask, and need no extra mask).

        Incremental decoding: with ``cache`` (:meth:`new_cache`, which holds the memory and
        its mask), ``tgt_ids`` are the next positions only (usually one token per row); their
        keys and values join the cache. The logits equal those of the whole prefix at once.
        """
        logits, _, _ = self._decode(tgt_ids, memory, memory_mask, need_weights=False, cache=cache)
        return logits

    def new_cache(
        self, memory: Tensor, memory_mask: Tensor | None = None, *, capacity: int
    ) -> DecoderCache:
        """A :class:`attnlab.layers.DecoderCache` for decoding against ``memory`` ``(B, S,
        d_model)`` (from :meth:`encode`) with its ``memory_mask``: each decoder layer projects
        the memory's keys and values here, once. ``capacity``: target positions to preallocate."""
        self._check_memory(memory, None)
        return self.decoder.new_cache(capacity, memory, memory_mask)

    def _check_memory(self, memory: object, tgt_ids: Tensor | None) -> None:
        d_model = self.config.d_model
        batch = "B" if tgt_ids is None else f"B={tgt_ids.shape[0]}"
        if not (
            isinstance(memory, Tensor)
            and memory.dim() == 3
            and (tgt_ids is None or memory.shape[0] == tgt_ids.shape[0])
            and memory.shape[2] == d_model
        ):
            given = "" if tgt_ids is None else f" for tgt_ids of shape {tuple(tgt_ids.shape)}"
            raise ValueError(
                f"memory: expected shape ({batch}, S, d_model={d_model}){given}, got "
                f"{shape_of(memory)}"
            )

    def _decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        need_weights: bool,
        cache: DecoderCache | None = None,
    ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        check_ids(tgt_ids, self.tgt_embed.vocab_size, "tgt_ids")
        if cache is None:
            self._check_memory(memory, tgt_ids)
        else:
            self.decoder._check_cache(cache)
            if memory is not None:
                raise ValueError("memory: the cache holds the memory (new_cache); pass memory=None")
        y, self_mask = _decoder_input(self.tgt_embed, tgt_ids, self.config.pad_id, cache)
        y, self_weights, cross_weights = self.decoder(
            y,
            memory,
            self_mask=self_mask,
            memory_mask=memory_mask,
            need_weights=need_weights,
            cache=cache,
        )
        return self.lm_head(y), self_weights, cross_weights

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher-forced logits ``(B, T, target vocab)``."""
        memory, mask, _ = self._encode(src_ids, need_weights=False)
        _check_same_batch(src_ids, tgt_ids)
        return self.decode(tgt_ids, memory, mask)

    @torch.no_grad()
    def attention(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """The attention weights of every layer and head (for pictures): encoder self, decoder
        self and cross-attention, each ``(B, H, T_q, T_k)``."""
        memory, mask, encoder = self._encode(src_ids, need_weights=True)
        _check_same_batch(src_ids, tgt_ids)
        _, decoder, cross = self._decode(tgt_ids, memory, mask, need_weights=True)
        return AttentionMaps(encoder=encoder, decoder=decoder, cross=cross)


class TransformerLM(_Pretrained):
    """Decoder-only Transformer: causal self-attention layers without cross-attention.

    Uses ``num_decoder_layers``; the pre-softmax projection is tied to the embedding when
    ``tie_output``. Padded tokens (``pad_id``) are masked as keys (trailing ones by the
    look-ahead mask alone).

    Shape: ``forward(ids (B, T)) -> logits (B, T, vocab_size)``.
    """

    model_type = "lm"
    uses_layers = ("num_decoder_layers",)

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = _check_config(config, type(self))
        c = config
        self.embed = Embeddings(c, c.vocab_size, name="ids")
        self.decoder = Decoder(
            c.num_decoder_layers,
            c.d_model,
            c.num_heads,
            c.d_ff,
            cross_attention=False,
            **_layer_options(c),
        )
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_output:
            self.lm_head.weight = self.embed.token.weight

    def _run(
        self, ids: Tensor, need_weights: bool, cache: DecoderCache | None = None
    ) -> tuple[Tensor, list[Tensor] | None]:
        check_ids(ids, self.embed.vocab_size, "ids")
        if cache is not None:
            self.decoder._check_cache(cache)
        x, mask = _decoder_input(self.embed, ids, self.config.pad_id, cache)
        x, weights, _ = self.decoder(x, self_mask=mask, need_weights=need_weights, cache=cache)
        return self.lm_head(x), weights

    def forward(self, ids: Tensor, *, cache: DecoderCache | None = None) -> Tensor:
        """Next-token logits ``(B, T, vocab_size)``: position t sees ids[:, : t + 1].

        Pads (``pad_id``) are never attended to, and positions count real tokens only, so a
        left-padded prompt gives the logits it would alone. With ``cache`` (:meth:`new_cache`)
        ``ids`` continue the cached sequence (usually one token per row).
        """
        logits, _ = self._run(ids, need_weights=False, cache=cache)
        return logits

    def new_cache(self, *, capacity: int) -> DecoderCache:
        """An empty :class:`attnlab.layers.DecoderCache` preallocating ``capacity`` positions."""
        return self.decoder.new_cache(capacity)

    @torch.no_grad()
    def attention(self, ids: Tensor) -> AttentionMaps:
        """Self-attention weights of every layer, ``AttentionMaps.decoder``."""
        _, weights = self._run(ids, need_weights=True)
        return AttentionMaps(decoder=weights)


class TransformerEncoder(_Pretrained):
    """Encoder-only Transformer in BERT's form (Devlin et al. 2019): token + learned position
    + token-type embeddings, LayerNorm, post-LN layers with GELU; mean pooling for sentence
    embeddings (Reimers and Gurevych 2019).

    Uses ``num_encoder_layers``; any positional kind works, BERT's is ``learned``.
    :meth:`from_bert` loads a Hugging Face BERT directory (config.json + model.safetensors).

    Shape: ``forward(input_ids (B, T)) -> hidden (B, T, d_model)``;
    ``embed(input_ids) -> (B, d_model)``.
    """

    model_type = "encoder"
    uses_layers = ("num_encoder_layers",)

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = _check_config(config, type(self))
        c = config
        self.embed = Embeddings(c, c.vocab_size, token_types=c.type_vocab_size, name="input_ids")
        self.encoder = Encoder(
            c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, **_layer_options(c)
        )
        self._init_weights()

    def _attention_mask(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        if attention_mask is None:
            return input_ids != self.config.pad_id
        if not isinstance(attention_mask, Tensor) or attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask: expected shape {tuple(input_ids.shape)} like input_ids, got "
                f"{shape_of(attention_mask)}"
            )
        if attention_mask.dtype != torch.bool:
            if attention_mask.dtype.is_floating_point or not bool(
                ((attention_mask == 0) | (attention_mask == 1)).all()
            ):
                raise ValueError("attention_mask: expected bool or 0/1 integers (1 = real token)")
            attention_mask = attention_mask.bool()
        return attention_mask

    def _run(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor, list[Tensor] | None]:
        real = self._attention_mask(input_ids, attention_mask)
        x = self.embed(input_ids, token_type_ids=token_type_ids)
        x, weights = self.encoder(x, mask=_key_mask_or_none(real), need_weights=need_weights)
        return x, real, weights

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Contextual token states ``(B, T, d_model)``.

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)``, True / 1 on real tokens; default: ``input_ids != pad_id``.
            token_type_ids: ``(B, T)`` segment ids; default all 0.
        """
        hidden, _, _ = self._run(input_ids, attention_mask, token_type_ids, need_weights=False)
        return hidden

    def embed_sentences(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        *,
        normalize: bool = True,
    ) -> Tensor:
        """Sentence embeddings ``(B, d_model)``: the mean of the real tokens' states,
        L2-normalised when ``normalize`` (as sentence-transformers' all-MiniLM-L6-v2)."""
        hidden, real, _ = self._run(input_ids, attention_mask, token_type_ids, need_weights=False)
        weights = real.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return F.normalize(pooled, dim=-1) if normalize else pooled

    @torch.no_grad()
    def attention(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> AttentionMaps:
        """Self-attention weights of every layer, ``AttentionMaps.encoder``."""
        _, _, weights = self._run(input_ids, attention_mask, token_type_ids, need_weights=True)
        return AttentionMaps(encoder=weights)

    @classmethod
    def from_bert(
        cls, directory: str | os.PathLike, *, device: torch.device | str | None = None
    ) -> TransformerEncoder:
        """Load a Hugging Face BERT checkpoint directory (``config.json`` and
        ``model.safetensors``, e.g. all-MiniLM-L6-v2); see :func:`attnlab.interop.load_bert`."""
        from .interop import load_bert

        return load_bert(directory, device=device)


# model_type -> class; other modules register theirs at import (attnlab.vision adds "vit").
_MODEL_TYPES: dict[str, type[_Pretrained]] = {
    "transformer": Transformer,
    "lm": TransformerLM,
    "encoder": TransformerEncoder,
}


def load_pretrained(
    directory: str | os.PathLike, *, device: torch.device | str | None = None
) -> _Pretrained:
    """Load any model written by ``save_pretrained``; its class comes from ``config.json``."""
    model_type, _ = read_config(directory)
    return _MODEL_TYPES[model_type].from_pretrained(directory, device=device)
