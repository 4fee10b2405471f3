"""attnlab: the Transformer of "Attention Is All You Need" (Vaswani et al. 2017), exact and fast.

The building blocks live one concept per module: :mod:`attnlab.masks` (the mask convention),
:mod:`attnlab.attention` (eq. 1 and multi-head attention), :mod:`attnlab.positional`
(sinusoidal, learned, rotary, ALiBi), :mod:`attnlab.layers` (encoder and decoder layers and
stacks), :mod:`attnlab.model` (the models and their config), :mod:`attnlab.generate` (greedy, beam
search and sampling on the KV cache), :mod:`attnlab.interop` (weights from torch.nn and Hugging
Face BERT), :mod:`attnlab.vision` (the Vision Transformer: the same encoder on image patches).
The instruments are imported on demand (``from attnlab import flops, viz,
explain``): :mod:`attnlab.flops` (exact MAC / FLOP counts), :mod:`attnlab.viz` (pictures, with
matplotlib), :mod:`attnlab.explain` (the tutorial's claims, run), :mod:`attnlab.schedule`
(eq. 3 and the cosine schedule), :mod:`attnlab.serve` (the attention explorer's web app).
"""

from . import generate, layers, masks, positional
from ._version import __version__
from .attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from .generate import Generation, beam_search, greedy_search, sample
from .layers import Decoder, DecoderCache, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masks import causal_mask, combine_masks, key_mask, padding_mask, padding_mask_from_ids
from .model import (
    AttentionMaps,
    Transformer,
    TransformerConfig,
    TransformerEncoder,
    TransformerLM,
    count_parameters,
    load_pretrained,
)
from .positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from .translator import Translator, load_translator
from .vision import VisionConfig, VisionTransformer

__all__ = [
    "ALiBi",
    "AttentionMaps",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "Generation",
    "KVCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerConfig",
    "TransformerEncoder",
    "TransformerLM",
    "Translator",
    "VisionConfig",
    "VisionTransformer",
    "__version__",
    "beam_search",
    "causal_mask",
    "combine_masks",
    "count_parameters",
    "generate",
    "greedy_search",
    "key_mask",
    "layers",
    "load_pretrained",
    "load_translator",
    "masks",
    "padding_mask",
    "padding_mask_from_ids",
    "positional",
    "sample",
    "scaled_dot_product_attention",
]
