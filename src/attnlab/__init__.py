"""attnlab: the Transformer of "Attention Is All You Need" (Vaswani et al. 2017), exact and fast.

The building blocks live one concept per module: :mod:`attnlab.masks` (the mask convention),
:mod:`attnlab.attention` (eq. 1 and multi-head attention), :mod:`attnlab.positional`
(sinusoidal, learned, rotary, ALiBi).
"""

from . import masks, positional
from .attention import MultiHeadAttention, scaled_dot_product_attention
from .masks import causal_mask, combine_masks, key_mask, padding_mask, padding_mask_from_ids
from .positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

__version__ = "0.1.0"

__all__ = [
    "ALiBi",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "__version__",
    "causal_mask",
    "combine_masks",
    "key_mask",
    "masks",
    "padding_mask",
    "padding_mask_from_ids",
    "positional",
    "scaled_dot_product_attention",
]
