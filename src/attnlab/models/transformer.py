"""The models: encoder-decoder, decoder-only and encoder-only Transformers.

* :class:`Transformer`: the paper's encoder-decoder (Vaswani et al. 2017, sec. 3, figure 1) for
  translation.
* :class:`TransformerLM`: decoder-only, causal (the decoder without cross-attention).
* :class:`TransformerEncoder`: BERT-style encoder with token types and mean pooling;
  :func:`attnlab.formats.bert.load_bert` loads real BERT checkpoints into it.
* :func:`count_parameters`: the analytic parameter count of a config.

All three are built from one :class:`attnlab.models.config.TransformerConfig` (with presets), embed
their ids with :class:`attnlab.models.embeddings.Embeddings`, and run the layer stacks of
:mod:`attnlab.nn.layers`. They save with ``save_pretrained(dir)`` (``config.json`` +
``model.safetensors``, no pickle) and load with ``Model.from_pretrained(dir)`` or
:func:`attnlab.models.saved.load_pretrained`, which knows them as ``transformer``, ``lm`` and
``encoder``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_type, shape_of
from ..nn.cache import DecoderCache
from ..nn.layers import Decoder, Encoder
from ..nn.positional import ALiBi, AttentionPositional, LearnedPositionalEmbedding, RotaryEmbedding
from .config import TransformerConfig
from .embeddings import Embeddings, check_ids, decoder_input, key_mask_or_none
from .saved import PretrainedModel, load_pretrained, model_class, register_model_type

__all__ = [
    "AttentionMaps",
    "Transformer",
    "TransformerConfig",
    "TransformerEncoder",
    "TransformerLM",
    "count_parameters",
    "load_pretrained",
]


# -- parameter count ---------------------------------------------------------------------------


def count_parameters(config: TransformerConfig, model_type: str = "transformer") -> int:
    """The number of parameters of a model built from ``config``, computed from the shapes.

    Args:
        config: the configuration.
        model_type: ``"transformer"`` (encoder-decoder), ``"lm"`` or ``"encoder"``; or a
            registered model of another config family, such as ``"vit"``
            (:class:`attnlab.models.vision.VisionConfig`), whose config counts itself.

    Equals ``sum(p.numel() for p in model.parameters())`` (tied weights counted once). The
    paper's base model has 65M at its 37,000-token vocabulary, and this count gives 63.1M: the
    paper's figure is rounded, and the exact vocabulary and bias use are not stated.
    """
    cls = model_class(model_type)
    if cls.config_class is not TransformerConfig:  # another family (e.g. "vit") counts itself
        if not isinstance(config, cls.config_class):
            raise TypeError(
                f"config: expected a {cls.config_class.__name__} for model_type={model_type!r}, "
                f"got {type(config).__name__}"
            )
        return int(config.num_parameters())
    _check_config(config, cls)  # type: ignore[arg-type]
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
        head += config.vocab_size if config.output_bias else 0
        layers = config.num_decoder_layers * (attention + ffn + 2 * norm)
        return embeddings(config.vocab_size) + layers + final_norm + head
    target = config.target_vocab_size
    head = (0 if config.tie_output else target * d) + (target if config.output_bias else 0)
    source = embeddings(config.vocab_size)
    tgt = embeddings(target)
    if config.share_embeddings:  # the token matrix is counted once
        tgt -= target * d
    encoder = config.num_encoder_layers * (attention + ffn + 2 * norm) + final_norm
    decoder = config.num_decoder_layers * (2 * attention + ffn + 3 * norm) + final_norm
    return source + tgt + encoder + decoder + head


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


class _TransformerModel(PretrainedModel):
    """What the three models of :class:`TransformerConfig` share: the config's checks for the
    layers a model builds, and the initialisation."""

    config_class: ClassVar[type] = TransformerConfig
    uses_layers: ClassVar[tuple[str, ...]]  # the config's layer counts the model builds
    config: TransformerConfig

    @classmethod
    def parameters_for(cls, config: Any) -> int | None:
        """:func:`count_parameters` of ``config`` for this class."""
        return count_parameters(config, cls.model_type)

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


def _check_config(config: object, cls: type[_TransformerModel]) -> TransformerConfig:
    """Validate ``config`` for building ``cls``: the layers it uses exist, and a single-stack
    model has one vocabulary."""
    config = check_type(config, TransformerConfig, "config", "a TransformerConfig")
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


class Transformer(_TransformerModel):
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
        self.lm_head = nn.Linear(c.d_model, c.target_vocab_size, bias=c.output_bias)
        self._init_weights()
        if c.tie_output:
            self.lm_head.weight = self.tgt_embed.token.weight

    def source_mask(self, src_ids: Tensor) -> Tensor | None:
        """``(B, 1, 1, S)`` key mask of the source's non-pad tokens, or None without padding."""
        return key_mask_or_none(src_ids != self.config.pad_id)

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
        """A :class:`attnlab.nn.cache.DecoderCache` for decoding against ``memory`` ``(B, S,
        d_model)`` (from :meth:`encode`) with its ``memory_mask``: each decoder layer projects
        the memory's keys and values here, once. ``capacity``: target positions to preallocate."""
        self._check_memory(memory, None)
        return self.decoder.new_cache(capacity, memory, memory_mask)

    def _check_memory(self, memory: object, tgt_ids: Tensor | None) -> None:
        d_model = self.config.d_model
        if not (
            isinstance(memory, Tensor)
            and memory.dim() == 3
            and (tgt_ids is None or memory.shape[0] == tgt_ids.shape[0])
            and memory.shape[2] == d_model
        ):
            batch = "B" if tgt_ids is None else f"B={tgt_ids.shape[0]}"
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
            self.decoder.check_cache(cache)
            if memory is not None:
                raise ValueError("memory: the cache holds the memory (new_cache); pass memory=None")
        y, self_mask = decoder_input(self.tgt_embed, tgt_ids, self._target_pad_id(), cache)
        y, self_weights, cross_weights = self.decoder(
            y,
            memory,
            self_mask=self_mask,
            memory_mask=memory_mask,
            need_weights=need_weights,
            cache=cache,
        )
        return self.lm_head(y), self_weights, cross_weights

    def _target_pad_id(self) -> int:
        """The id the decoder treats as padding: ``pad_id``, or none (-1) when the decoder
        starts from the pad token (Marian), whose target pads only ever trail and are hidden by
        the look-ahead mask alone."""
        return -1 if self.config.decoder_starts_from_pad else self.config.pad_id

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
        return AttentionMaps(encoder=encoder or [], decoder=decoder or [], cross=cross or [])


class TransformerLM(_TransformerModel):
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
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=c.output_bias)
        self._init_weights()
        if c.tie_output:
            self.lm_head.weight = self.embed.token.weight

    def _run(
        self, ids: Tensor, need_weights: bool, cache: DecoderCache | None = None
    ) -> tuple[Tensor, list[Tensor] | None]:
        check_ids(ids, self.embed.vocab_size, "ids")
        if cache is not None:
            self.decoder.check_cache(cache)
        x, mask = decoder_input(self.embed, ids, self.config.pad_id, cache)
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
        """An empty :class:`attnlab.nn.cache.DecoderCache` preallocating ``capacity`` positions."""
        return self.decoder.new_cache(capacity)

    @torch.no_grad()
    def attention(self, ids: Tensor) -> AttentionMaps:
        """Self-attention weights of every layer, ``AttentionMaps.decoder``."""
        _, weights = self._run(ids, need_weights=True)
        return AttentionMaps(decoder=weights or [])


class TransformerEncoder(_TransformerModel):
    """Encoder-only Transformer in BERT's form (Devlin et al. 2019): token + learned position
    + token-type embeddings, LayerNorm, post-LN layers with GELU; mean pooling for sentence
    embeddings (Reimers and Gurevych 2019).

    Uses ``num_encoder_layers``; any positional kind works, BERT's is ``learned``.
    :func:`attnlab.formats.bert.load_bert` loads a Hugging Face BERT directory (config.json +
    model.safetensors) into one.

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
        x, weights = self.encoder(x, mask=key_mask_or_none(real), need_weights=need_weights)
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
        return AttentionMaps(encoder=weights or [])


for _model in (Transformer, TransformerLM, TransformerEncoder):
    register_model_type(_model)
