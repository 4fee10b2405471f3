"""Pictures of how the Transformer works: attention weights, positional encodings, masks, the
learning-rate schedule and training curves.

Every function returns a :class:`matplotlib.figure.Figure` and, given ``path=``, writes it there
as a PNG (parent folders created; written to a temporary file, then renamed, so a reader never
sees half an image). Figures are built on :class:`~matplotlib.figure.Figure` with an Agg canvas,
never through ``pyplot``: importing this module selects no backend and changes no global state,
an interactive session keeps its backend, figures can be drawn from several threads, and nothing
accumulates in pyplot's figure registry. In Jupyter the returned figure displays as usual.

Tensors may live on any device and have any floating dtype; only what is drawn is copied to
the CPU (as float32). ``dpi`` sets the figure's resolution (and the PNG's): a figure of
``size_inches`` ``(w, h)`` is written as ``int(w * dpi) x int(h * dpi)`` pixels.

========================================  ======================================================
:func:`attention_heatmaps`                layers x heads grid of attention weights (sec. 3.2;
                                          T2, T4)
:func:`attention_maps`                    encoder / decoder / cross pictures of one sentence of
                                          :class:`attnlab.models.transformer.AttentionMaps`,
                                          pads cropped
:func:`positional_encoding`               the sinusoidal table and its similarity (sec. 3.5;
                                          T7, T8)
:func:`learned_positional_similarity`     cosine similarity of learned position vectors (T8)
:func:`masks`                             padding, look-ahead and combined masks (sec. 3.2.3;
                                          T9-T11)
:func:`lr_schedule`                       eq. 3 of sec. 5.3 with its peaks
:func:`training_curves`                   a metrics CSV, one panel per quantity
:func:`vit_positional_similarity`         ViT's patch position similarity mosaic (figure 7)
:func:`attention_rollout_map`             a ViT's class-token attention rollout over the
                                          image (figure 6)
========================================  ======================================================
"""

from .attention import attention_heatmaps, attention_maps
from .masking import masks
from .positions import learned_positional_similarity, positional_encoding
from .training import lr_schedule, training_curves
from .vision import attention_rollout_map, vit_positional_similarity

__all__ = [
    "attention_heatmaps",
    "attention_maps",
    "attention_rollout_map",
    "learned_positional_similarity",
    "lr_schedule",
    "masks",
    "positional_encoding",
    "training_curves",
    "vit_positional_similarity",
]
