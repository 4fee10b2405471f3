"""Foreign formats, one module each, both directions where both exist: :mod:`.marian`
(Hugging Face Marian / opus-mt, import and export, one name map), :mod:`.ctranslate2`
(export), :mod:`.bert` (BERT checkpoints in). torch.nn's attention and layers, both ways, are
beside the building blocks they copy: :mod:`attnlab.nn.torch_nn`.

Export: a model leaves attnlab as a directory that another engine runs by itself, computing the same
function on the same weights:

* :func:`to_ctranslate2`: a CTranslate2 model directory (``ctranslate2.Translator``), built
  with CTranslate2's own specification classes: the Transformer's weights (the query, key and
  value projections fused as CTranslate2 expects), attnlab's position table written into the
  model (the paper's interleaved sines and cosines, Vaswani et al. 2017, sec. 3.5, not
  CTranslate2's default layout), the vocabularies, and the special tokens. Optional weight
  quantization (``int8``, ``int16``, ``float16``, ...).
* :func:`to_huggingface`: a ``MarianMTModel`` directory (the post-LN encoder-decoder with
  sinusoidal positions that transformers ships), a generation config, and a fast tokenizer
  (attnlab's own ``tokenizer.json`` behind ``PreTrainedTokenizerFast``) that gives attnlab's
  ids exactly. ``AutoTokenizer`` and ``AutoModelForSeq2SeqLM`` load it offline. (transformers
  5 removed the ``pipeline("translation")`` task; tokenizer, ``generate`` and
  ``batch_decode`` are what it did.)
* :func:`export_model`: either, from a model directory written by ``attnlab train``.

The modules: :mod:`.common` (what each target can express, vocabularies, the output
directory's checks), :mod:`.ctranslate2` (CTranslate2) and :mod:`.marian` (Hugging Face, both ways;
its name map and permutation, once).

What a target cannot express is refused with a one-line ``ValueError`` naming the option and
the target, before anything is written; :func:`unsupported` lists the reasons. CTranslate2
takes every option of an encoder-decoder but ALiBi; Marian needs post-LN, sinusoidal
positions, no embedding LayerNorm and LayerNorm epsilon 1e-5 (grouped-query attention is
exported with each key / value head repeated, biases-free layers with zero biases). The output
directory is built beside ``out_dir`` under a temporary name, flushed to disk, and renamed into
place: a failure never leaves a half-written ``out_dir``.

Marian's position table puts all sines first, then all cosines: column ``j < d/2`` of Marian
is attnlab's column ``2j`` and column ``d/2 + j`` is attnlab's ``2j + 1``. The export applies
that one permutation of the model dimension to every weight that touches the residual stream
(embedding columns, LayerNorm parameters, the input side of the query / key / value and
first FFN projections, the output side of the attention output and second FFN projections).
LayerNorm statistics and dot products do not depend on the order of the dimensions, and the
heads (the rows of the query / key / value projections) are left as they are, so the Marian
model computes exactly attnlab's function with transformers' own position table, which
survives ``from_pretrained`` and ``save_pretrained`` unchanged.

Length penalties differ between the three engines: attnlab's beam search ranks finished
hypotheses by ``log P / ((5 + |Y|) / 6)^alpha`` (Wu et al. 2016), transformers by
``log P / |Y|^length_penalty`` (``|Y|`` counting EOS), CTranslate2 by
``log P / |Y|^length_penalty`` (``|Y|`` counting EOS too). They coincide at ``alpha = 0``
and ``length_penalty = 0`` (plain log-probability). Then all three stop a sentence once its
best finished hypothesis outranks every live one (transformers with
``early_stopping="never"``, which the export writes; CTranslate2 when its best-ranked
candidate ends), and they return the same outputs up to ties within rounding.
"""

from __future__ import annotations

from pathlib import Path

from .common import (
    MIN_POSITIONS,
    TARGETS,
    PathLike,
    check_exportable,
    check_target,
    tokenizer_pair,
    unsupported,
)
from .ctranslate2 import QUANTIZATIONS, to_ctranslate2
from .marian import marian_permutation, to_huggingface

__all__ = [
    "MIN_POSITIONS",
    "QUANTIZATIONS",
    "TARGETS",
    "export_model",
    "marian_permutation",
    "to_ctranslate2",
    "to_huggingface",
    "unsupported",
]


def export_model(
    model_dir: PathLike,
    out_dir: PathLike,
    *,
    to: str,
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Export the model directory ``model_dir`` written by ``attnlab train`` (``config.json``,
    ``model.safetensors`` and the tokenizer files) to ``out_dir``, for ``to`` in
    :data:`TARGETS`; ``quantization`` (CTranslate2 only) and ``force`` as
    :func:`to_ctranslate2`. The export's decoding settings (a generation config, a README's
    example) are the model's own (its recipe's ``[eval]``, as ``attnlab translate`` decodes
    it). Returns ``out_dir``. Checks everything before writing."""
    from ..models.transformer import load_pretrained

    to = check_target(to)
    if quantization is not None and to != "ctranslate2":
        raise ValueError(f"quantization: only the ctranslate2 target quantizes, not {to}")
    model_path, out_path = Path(model_dir), Path(out_dir)
    if out_path.exists() and out_path.resolve() == model_path.resolve():
        raise ValueError(f"out_dir: {out_path} is the model directory; choose another")
    model = load_pretrained(model_path)
    check_exportable(model, to)
    tokenizers = tokenizer_pair(model_path)
    from ..decode.options import DecodingOptions

    decoding = DecodingOptions.carried_by(model_path)[0]  # the model's own, as translate's
    if to == "ctranslate2":
        return to_ctranslate2(
            model, tokenizers, out_path, quantization=quantization, force=force, decoding=decoding
        )
    return to_huggingface(model, tokenizers, out_path, force=force, decoding=decoding)
