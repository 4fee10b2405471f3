"""attnlab's encoder-decoder as a CTranslate2 model directory, built with CTranslate2's own
specification classes (``TransformerSpec``; ``validate``, ``optimize``, ``save``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._checks import check_choice
from .._io import atomic_write_dir
from .common import (
    PathLike,
    check_exportable,
    check_out_dir,
    float_state,
    position_table,
    same_tokenizer,
    tokenizer_pair,
    vocabulary,
)

if TYPE_CHECKING:
    from ..decode.options import DecodingOptions

__all__ = ["EXPORT_VERSION", "QUANTIZATIONS", "to_ctranslate2"]

#: The version of what :func:`to_ctranslate2` writes: bump it when its output changes, so that
#: models converted before (:mod:`attnlab.inference.engines`' cache) are converted again.
EXPORT_VERSION = 1

#: CTranslate2's weight types (``--quantization``); None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}


def to_ctranslate2(
    model: Any,
    tokenizers: Any,
    out_dir: PathLike,
    *,
    quantization: str | None = None,
    force: bool = False,
    decoding: DecodingOptions | None = None,
) -> Path:
    """Write ``model`` as a CTranslate2 model directory that ``ctranslate2.Translator`` loads.

    Args:
        model: an encoder-decoder :class:`attnlab.Transformer`.
        tokenizers: its :class:`attnlab.data.tokenizer.Tokenizer` (joint vocabulary), a
            ``(src, tgt)`` pair, or a model directory holding the tokenizer files.
        out_dir: the directory to create.
        quantization: CTranslate2 weight type, one of :data:`QUANTIZATIONS` (None: float32).
        force: replace an existing ``out_dir``.
        decoding: the model's decoding, which the README's example uses (its beam; default
            the paper's beam 4).

    The directory holds ``model.bin`` and ``config.json`` (CTranslate2's), the vocabulary
    (``shared_vocabulary.json``, or ``source_`` and ``target_vocabulary.json``; token strings
    by id), attnlab's tokenizer files, and a README on running it. Sources are token strings
    without BOS or EOS (as attnlab frames them); the decoder starts from attnlab's BOS.

    Returns: ``out_dir``.

    Raises:
        ValueError: an option CTranslate2 cannot express, a bad ``quantization``, tokenizers
            that do not match the model.
        FileExistsError: ``out_dir`` exists and ``force`` is False.
    """
    check_exportable(model, "ctranslate2")
    check_choice(quantization, QUANTIZATIONS, "quantization", none=True)
    src, tgt = tokenizer_pair(tokenizers)
    c = model.config
    src_tokens = vocabulary(src, c.vocab_size, "source")
    tgt_tokens = vocabulary(tgt, c.target_vocab_size, "target")
    out = check_out_dir(out_dir, force)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ImportError(
            "ctranslate2: not installed; `pip install ctranslate2` to export to CTranslate2"
        ) from None
    spec = _spec(model, src_tokens, tgt_tokens, tgt.unk_id)
    from ..decode.options import BEAM_SIZE

    beam = BEAM_SIZE if decoding is None else decoding.beam_size
    joint = same_tokenizer(src, tgt)

    from ..data.marian_files import to_marian_dir

    marian = src.kind == tgt.kind == "sentencepiece"

    def build(directory: Path) -> None:
        from ..data.tokenizer import save_tokenizers

        spec.optimize(quantization=quantization)
        spec.save(str(directory))
        save_tokenizers(directory, src, None if joint else tgt)
        if marian:  # an imported Marian model: its SentencePiece files too, for plain Python
            to_marian_dir(directory, src, tgt)
        readme = _readme(c, src_tokens, tgt_tokens, quantization, joint, beam)
        if marian:
            readme = _readme_sentencepiece(c, tgt_tokens, quantization, beam)
        (directory / "README.md").write_text(readme, encoding="utf-8")

    return atomic_write_dir(out, build)


def _spec(model: Any, src_tokens: list[str], tgt_tokens: list[str], unk_id: int):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, validated."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    state = float_state(model)
    activation = getattr(common_spec.Activation, _ACTIVATIONS[c.activation])
    kv_heads = c.num_kv_heads if c.num_kv_heads not in (None, c.num_heads) else None
    options = {
        "pre_norm": c.norm_first,
        "activation": activation,
        "layernorm_embedding": c.embedding_norm,
        "num_heads_kv": kv_heads,
    }
    if c.positional == "rotary":  # attnlab rotates channel i with i + Dh/2 ("rotate half")
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=10000.0)
    encoder = transformer_spec.TransformerEncoderSpec(c.num_encoder_layers, c.num_heads, **options)
    decoder = transformer_spec.TransformerDecoderSpec(c.num_decoder_layers, c.num_heads, **options)
    d = c.d_model

    def numpy(name: str, rows: slice = slice(None)):
        # A copy: spec.optimize() quantizes and fuses these arrays in place, and a view would
        # change the caller's model.
        return state[name][rows].clone(memory_format=torch.contiguous_format).numpy()

    def linear(spec: Any, prefix: str, rows: slice = slice(None)) -> None:
        spec.weight = numpy(f"{prefix}.weight", rows)
        if f"{prefix}.bias" in state:
            spec.bias = numpy(f"{prefix}.bias", rows)

    def norm(spec: Any, prefix: str) -> None:
        spec.gamma, spec.beta = numpy(f"{prefix}.weight"), numpy(f"{prefix}.bias")

    def inputs(spec: Any, side: str, embeddings: Any) -> None:
        embeddings.weight = numpy(f"{side}_embed.token.weight")
        spec.scale_embeddings = c.scale_embeddings
        if hasattr(spec, "position_encodings"):  # absent from a rotary decoder
            spec.position_encodings.encodings = position_table(c, state, side).clone().numpy()
        if c.embedding_norm:
            norm(spec.layernorm_embedding, f"{side}_embed.norm")

    inputs(encoder, "src", encoder.embeddings[0])
    for i, layer in enumerate(encoder.layer):
        p = f"encoder.layers.{i}"
        linear(layer.self_attention.linear[0], f"{p}.self_attn.in_proj")  # fused q, k, v
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.norm1")
        linear(layer.ffn.linear_0, f"{p}.ff.linear1")
        linear(layer.ffn.linear_1, f"{p}.ff.linear2")
        norm(layer.ffn.layer_norm, f"{p}.norm2")
    inputs(decoder, "tgt", decoder.embeddings)
    for i, layer in enumerate(decoder.layer):
        p = f"decoder.layers.{i}"
        linear(layer.self_attention.linear[0], f"{p}.self_attn.in_proj")
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.norm1")
        linear(layer.attention.linear[0], f"{p}.cross_attn.in_proj", slice(0, d))  # queries
        linear(layer.attention.linear[1], f"{p}.cross_attn.in_proj", slice(d, None))  # k, v
        linear(layer.attention.linear[2], f"{p}.cross_attn.out_proj")
        norm(layer.attention.layer_norm, f"{p}.norm2")
        linear(layer.ffn.linear_0, f"{p}.ff.linear1")
        linear(layer.ffn.linear_1, f"{p}.ff.linear2")
        norm(layer.ffn.layer_norm, f"{p}.norm3")
    if c.norm_first:  # pre-LN stacks end in a LayerNorm
        norm(encoder.layer_norm, "encoder.norm")
        norm(decoder.layer_norm, "decoder.norm")
    linear(decoder.projection, "lm_head")  # with Marian's final logits bias, if any

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.unk_token = tgt_tokens[unk_id]
    spec.config.bos_token = tgt_tokens[c.bos_id]
    spec.config.eos_token = tgt_tokens[c.eos_id]
    spec.config.decoder_start_token = tgt_tokens[c.bos_id]
    spec.config.add_source_bos = False  # attnlab's source tokenizer frames sources itself
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = c.layer_norm_eps
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    spec.validate()
    return spec


def _readme(
    config: Any,
    src_tokens: list[str],
    tgt_tokens: list[str],
    quantization: str | None,
    joint: bool,
    beam: int,
) -> str:
    banned = sorted({config.pad_id, config.bos_id} - {config.eos_id})
    suppress = [[tgt_tokens[i]] for i in banned]
    tokenizer = "tokenizer.json" if joint else "src_tokenizer.json"
    target_tokenizer = "tokenizer.json" if joint else "tgt_tokenizer.json"
    weights = quantization or "float32"
    return f"""# attnlab model for CTranslate2

Exported by `attnlab export --to ctranslate2` (weights: {weights}). The encoder-decoder
Transformer computes attnlab's function: same weights, attnlab's sinusoidal position table.

```python
import ctranslate2
from tokenizers import Tokenizer  # attnlab's tokenizer files are Hugging Face tokenizers

model_dir = "THIS_DIRECTORY"
source_tokenizer = Tokenizer.from_file(f"{{model_dir}}/{tokenizer}")
target_tokenizer = Tokenizer.from_file(f"{{model_dir}}/{target_tokenizer}")
source_tokenizer.encode_special_tokens = True  # as attnlab: "<eos>" in text is plain text

translator = ctranslate2.Translator(model_dir, device="cpu")
texts = ["..."]
tokens = [source_tokenizer.encode(t, add_special_tokens=False).tokens for t in texts]
results = translator.translate_batch(
    tokens,                   # token strings, no BOS / EOS (attnlab does not frame sources)
    beam_size={beam},              # the model's own; 1: greedy, token for token attnlab's
    length_penalty=0,         # see below
    min_decoding_length=0,    # attnlab allows EOS first
    suppress_sequences={suppress!r},  # never generated by attnlab
)
ids = [[target_tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
print([target_tokenizer.decode(i) for i in ids])
```

With attnlab installed, `attnlab.data.tokenizer.load_tokenizers(model_dir)` gives the same
tokenizers: token strings are `[tok.backend.id_to_token(i) for i in tok.encode(text)]`, and
`tok.decode(ids)` is attnlab's text exactly (it writes bytes that form no character as
escapes such as `\\xc3`, where the `tokenizers` decoder writes U+FFFD).

Length penalty: attnlab's beam search ranks by `log P / ((5 + |Y|) / 6) ** alpha` (|Y| counts
EOS; alpha 0.6 by default), CTranslate2 by `log P / |Y| ** length_penalty` (|Y| counts EOS too).
With `length_penalty=0` and attnlab's `alpha=0` both rank by the log-probability.
Source vocabulary: {len(src_tokens)} tokens; target: {len(tgt_tokens)}.
"""


def _readme_sentencepiece(
    config: Any, tgt_tokens: list[str], quantization: str | None, beam: int
) -> str:
    """The README of a model whose tokenizers are Marian's SentencePiece models."""
    banned = sorted({config.pad_id, config.bos_id} - {config.eos_id})
    suppress = [[tgt_tokens[i]] for i in banned]
    eos = tgt_tokens[config.eos_id]
    return f"""# attnlab model for CTranslate2 (imported from Marian)

Exported by `attnlab export --to ctranslate2` (weights: {quantization or "float32"}) from a model
imported from a transformers Marian (opus-mt) directory. Its tokenizers are Marian's
SentencePiece models, here as `source.spm`, `target.spm` and `vocab.json` beside attnlab's own
files. The decoder starts from `{tgt_tokens[config.bos_id]}`, as Marian's does.

```python
import ctranslate2
import sentencepiece as spm

model_dir = "THIS_DIRECTORY"
source = spm.SentencePieceProcessor(model_file=f"{{model_dir}}/source.spm")
target = spm.SentencePieceProcessor(model_file=f"{{model_dir}}/target.spm")

translator = ctranslate2.Translator(model_dir, device="cpu")
texts = ["..."]
tokens = [source.encode(t, out_type=str) + [{eos!r}] for t in texts]  # Marian's framing
results = translator.translate_batch(
    tokens,
    beam_size={beam},                # the model's own
    length_penalty=0,          # attnlab's alpha=0: both rank by the log-probability
    min_decoding_length=0,     # attnlab allows EOS first
    suppress_sequences={suppress!r},  # never generated by attnlab
)
print([target.decode(r.hypotheses[0]) for r in results])
```

transformers' `MarianTokenizer` reads this directory too (`MarianTokenizer.from_pretrained`);
it and `attnlab.data.load_tokenizers(model_dir)` tokenize alike (a piece missing from Marian's
vocabulary becomes `<unk>`, which plain SentencePiece does not know).
"""
