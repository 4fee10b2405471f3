"""attnlab: the Transformer of "Attention Is All You Need" (Vaswani et al. 2017), exact and fast.

The packages, each named for what it holds:

* :mod:`attnlab.nn`: the building blocks: masks, attention (eq. 1, multi-head), positional
  encodings, layers and stacks, embeddings, the KV cache;
* :mod:`attnlab.models`: :class:`TransformerConfig`, the models, the Vision Transformer, and
  attnlab's saved format (``config.json`` + ``model.safetensors``);
* :mod:`attnlab.decode`: greedy, beam search and sampling, their session, the fast step,
  constraints;
* :mod:`attnlab.inference`: the :class:`Translator`, model directories, scores;
* :mod:`attnlab.formats`: foreign formats, both ways (Marian, CTranslate2, BERT, torch.nn);
* :mod:`attnlab.data`, :mod:`attnlab.train`, :mod:`attnlab.tasks`: corpora and tokenizers,
  the trainer, the tasks a job can name;
* :mod:`attnlab.instruments`: flops, viz and explain, imported on demand
  (``from attnlab.instruments import flops``); :mod:`attnlab.serve`: the attention explorer.
"""

# _interrupt first: in the attnlab command, Ctrl-C is handled from here on (before torch loads)
from typing import TYPE_CHECKING

from . import _interrupt  # noqa: F401
from ._lazy import lazy_exports
from ._version import __version__

# The names below load on first use (attnlab._lazy): importing a submodule that needs no
# torch (a preparation worker, the command line's parser) does not load torch and the models.
__getattr__, __dir__ = lazy_exports(globals())  # the names imported below

if TYPE_CHECKING:  # the public names, as type checkers read them; made on first use
    from .decode import search as generate
    from .decode.options import DecodingOptions
    from .decode.search import Generation, beam_search, greedy_search, sample
    from .inference.translator import Translator, load_translator
    from .models.transformer import (
        AttentionMaps,
        Transformer,
        TransformerConfig,
        TransformerEncoder,
        TransformerLM,
        count_parameters,
        load_pretrained,
    )
    from .models.vision import VisionConfig, VisionTransformer
    from .nn import layers, masks, positional
    from .nn.attention import MultiHeadAttention, scaled_dot_product_attention
    from .nn.cache import DecoderCache, KVCache
    from .nn.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
    from .nn.masks import (
        causal_mask,
        combine_masks,
        key_mask,
        padding_mask,
        padding_mask_from_ids,
    )
    from .nn.positional import (
        ALiBi,
        LearnedPositionalEmbedding,
        RotaryEmbedding,
        SinusoidalPositionalEncoding,
    )

__all__ = [
    "ALiBi",
    "AttentionMaps",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "DecodingOptions",
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
