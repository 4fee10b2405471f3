"""Export: attnlab translation models to CTranslate2 and to Hugging Face transformers.

A model leaves attnlab as a directory that another engine runs by itself, computing the same
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
``log P / |Y|^length_penalty`` (``|Y|`` without EOS). They coincide at ``alpha = 0`` and
``length_penalty = 0`` (plain log-probability). Then transformers (with
``early_stopping=True``) searches exactly as attnlab: it stops once ``num_beams`` hypotheses
have finished. CTranslate2 stops as soon as its best-ranked candidate finishes; the answer is
the same unless attnlab's ``beam_size`` finished hypotheses are all outranked by a live one
that would finish later with a higher score.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ._io import atomic_write_dir

__all__ = [
    "QUANTIZATIONS",
    "TARGETS",
    "export_model",
    "to_ctranslate2",
    "to_huggingface",
    "unsupported",
]

PathLike = str | os.PathLike

#: Export targets, as ``attnlab export --to`` names them.
TARGETS = ("ctranslate2", "huggingface")
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
#: Positions in the exported tables of sinusoidal (and absent) encodings: attnlab's sinusoids
#: extrapolate to any length, the other engines need a table (a learned one keeps ``max_len``).
MIN_POSITIONS = 1024
#: transformers' LayerNorm epsilon in Marian (fixed, not configurable).
MARIAN_LAYER_NORM_EPS = 1e-5

_CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh"}
_HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}
_TARGET_NAMES = {"ctranslate2": "CTranslate2", "huggingface": "Hugging Face (MarianMTModel)"}


# -- what each target can express --------------------------------------------------------------


def unsupported(model: object, target: str) -> list[str]:
    """Why ``model`` cannot be exported to ``target``: one line per option the target cannot
    express, each naming the option (empty when it can be exported).

    Both targets take the encoder-decoder :class:`attnlab.Transformer`. CTranslate2 expresses
    every option of its config except ALiBi positions; Marian (Hugging Face) needs post-LN,
    sinusoidal positions, no embedding LayerNorm and LayerNorm epsilon 1e-5.
    """
    target = _check_target(target)
    name = _TARGET_NAMES[target]
    from .model import Transformer

    if not isinstance(model, Transformer):
        return [
            f"model: {name} export takes an encoder-decoder attnlab.Transformer (model type "
            f"'transformer'), got {type(model).__name__}"
        ]
    c = model.config
    reasons = []
    if target == "ctranslate2":
        if c.positional == "alibi":
            reasons.append(
                f"positional='alibi': {name} export cannot express ALiBi in an encoder "
                f"(its Transformer encoder has no attention biases)"
            )
        return reasons
    if c.positional != "sinusoidal":
        reasons.append(
            f"positional={c.positional!r}: {name} export needs 'sinusoidal' positions (Marian "
            f"computes its own sinusoidal table when it loads)"
        )
    if c.norm_first:
        reasons.append(f"norm_first=True: {name} export needs post-LN (Marian has no pre-LN)")
    if c.embedding_norm:
        reasons.append(f"embedding_norm=True: {name} export cannot express an embedding LayerNorm")
    if c.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        reasons.append(
            f"layer_norm_eps={c.layer_norm_eps!r}: {name} export needs {MARIAN_LAYER_NORM_EPS} "
            f"(Marian's fixed LayerNorm epsilon)"
        )
    return reasons


def _check_target(target: object) -> str:
    if target not in TARGETS:
        raise ValueError(f"to: expected one of {', '.join(TARGETS)}, got {target!r}")
    return str(target)


def _check_exportable(model: object, target: str) -> None:
    reasons = unsupported(model, target)
    if reasons:
        raise ValueError(reasons[0])


# -- tokenizers --------------------------------------------------------------------------------


def _tokenizer_pair(tokenizers: object) -> tuple[Any, Any]:
    """``(src, tgt)`` from one Tokenizer (joint vocabulary), a pair, or a directory."""
    from .data.tokenizer import Tokenizer, load_tokenizers

    if isinstance(tokenizers, Tokenizer):
        return tokenizers, tokenizers
    if isinstance(tokenizers, (str, os.PathLike)):
        return load_tokenizers(tokenizers)
    if (
        isinstance(tokenizers, Sequence)
        and len(tokenizers) == 2
        and all(isinstance(t, Tokenizer) for t in tokenizers)
    ):
        return tokenizers[0], tokenizers[1]
    raise TypeError(
        f"tokenizers: expected an attnlab Tokenizer, a (src, tgt) pair of them, or a model "
        f"directory holding their files, got {type(tokenizers).__name__}"
    )


def _vocabulary(tokenizer: Any, size: int, side: str) -> list[str]:
    """The token string of every id ``0 .. size - 1`` (the model's vocabulary on ``side``)."""
    backend = tokenizer.backend
    if tokenizer.vocab_size != size:
        raise ValueError(
            f"tokenizer: the {side} tokenizer has {tokenizer.vocab_size} tokens, but the "
            f"model's {side} vocabulary has {size}"
        )
    tokens = [backend.id_to_token(i) for i in range(size)]
    missing = next((i for i, token in enumerate(tokens) if token is None), None)
    if missing is not None:
        raise ValueError(f"tokenizer: the {side} tokenizer has no token for id {missing}")
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"tokenizer: the {side} tokenizer's token strings are not unique")
    return tokens


def _same_tokenizer(src: Any, tgt: Any) -> bool:
    return src is tgt or src.backend.to_str() == tgt.backend.to_str()


# -- atomic output directories -----------------------------------------------------------------


def _check_out_dir(out_dir: PathLike, force: bool) -> Path:
    out = Path(out_dir)
    if not isinstance(force, bool):
        raise TypeError(f"force: expected a bool, got {force!r}")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise FileExistsError(f"out_dir: {out} exists and is not a directory")
        if not force:
            raise FileExistsError(
                f"out_dir: {out} already exists; pass force=True (attnlab export --force) to "
                f"replace it"
            )
    return out


# -- weights -----------------------------------------------------------------------------------


def _float_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """The state dict, detached, in float32 on the CPU (tied tensors appear under each name)."""
    return {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}


def _positions(config: Any) -> int:
    return config.max_len if config.positional == "learned" else max(config.max_len, MIN_POSITIONS)


def _position_table(config: Any, state: dict[str, Tensor], side: str) -> Tensor:
    """What attnlab adds to the ``side`` ("src" / "tgt") embeddings at each position:
    ``(positions, d_model)``."""
    from .positional import sinusoidal_table

    length, d = _positions(config), config.d_model
    if config.positional == "sinusoidal":
        return sinusoidal_table(length, d).to(torch.float32)  # the module's float32 values
    if config.positional == "learned":
        return state[f"{side}_embed.position.weight"]
    return torch.zeros(length, d)  # "none", "rotary": nothing is added to the embeddings


# -- CTranslate2 -------------------------------------------------------------------------------


def to_ctranslate2(
    model: Any,
    tokenizers: Any,
    out_dir: PathLike,
    *,
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Write ``model`` as a CTranslate2 model directory that ``ctranslate2.Translator`` loads.

    Args:
        model: an encoder-decoder :class:`attnlab.Transformer`.
        tokenizers: its :class:`attnlab.data.tokenizer.Tokenizer` (joint vocabulary), a
            ``(src, tgt)`` pair, or a model directory holding the tokenizer files.
        out_dir: the directory to create.
        quantization: CTranslate2 weight type, one of :data:`QUANTIZATIONS` (None: float32).
        force: replace an existing ``out_dir``.

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
    _check_exportable(model, "ctranslate2")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization: expected one of {', '.join(QUANTIZATIONS)} (or None), got "
            f"{quantization!r}"
        )
    src, tgt = _tokenizer_pair(tokenizers)
    c = model.config
    src_tokens = _vocabulary(src, c.vocab_size, "source")
    tgt_tokens = _vocabulary(tgt, c.target_vocab_size, "target")
    out = _check_out_dir(out_dir, force)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ImportError(
            "ctranslate2: not installed; `pip install ctranslate2` to export to CTranslate2"
        ) from None
    spec = _ctranslate2_spec(model, src_tokens, tgt_tokens, tgt.unk_id)
    joint = _same_tokenizer(src, tgt)

    def build(directory: Path) -> None:
        from .data.tokenizer import save_tokenizers

        spec.optimize(quantization=quantization)
        spec.save(str(directory))
        save_tokenizers(directory, src, None if joint else tgt)
        (directory / "README.md").write_text(
            _ctranslate2_readme(c, src_tokens, tgt_tokens, quantization, joint),
            encoding="utf-8",
        )

    return atomic_write_dir(out, build)


def _ctranslate2_spec(model: Any, src_tokens: list[str], tgt_tokens: list[str], unk_id: int):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, validated."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    state = _float_state(model)
    activation = getattr(common_spec.Activation, _CT2_ACTIVATIONS[c.activation])
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

    def numpy(name: str):
        return state[name].contiguous().numpy()

    def linear(spec: Any, prefix: str, rows: slice = slice(None)) -> None:
        spec.weight = state[f"{prefix}.weight"][rows].contiguous().numpy()
        if f"{prefix}.bias" in state:
            spec.bias = state[f"{prefix}.bias"][rows].contiguous().numpy()

    def norm(spec: Any, prefix: str) -> None:
        spec.gamma, spec.beta = numpy(f"{prefix}.weight"), numpy(f"{prefix}.bias")

    def inputs(spec: Any, side: str, embeddings: Any) -> None:
        embeddings.weight = numpy(f"{side}_embed.token.weight")
        spec.scale_embeddings = c.scale_embeddings
        if hasattr(spec, "position_encodings"):  # absent from a rotary decoder
            spec.position_encodings.encodings = _position_table(c, state, side).numpy()
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
    decoder.projection.weight = numpy("lm_head.weight")

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.unk_token = tgt_tokens[unk_id]
    spec.config.bos_token = tgt_tokens[c.bos_id]
    spec.config.eos_token = tgt_tokens[c.eos_id]
    spec.config.decoder_start_token = tgt_tokens[c.bos_id]
    spec.config.add_source_bos = False  # attnlab's sources carry no BOS / EOS
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = c.layer_norm_eps
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    spec.validate()
    return spec


def _ctranslate2_readme(
    config: Any, src_tokens: list[str], tgt_tokens: list[str], quantization: str | None, joint
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
    beam_size=4,              # 1: greedy, token for token attnlab's greedy_search
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
EOS; alpha 0.6 by default), CTranslate2 by `log P / |Y| ** length_penalty` (|Y| without EOS).
With `length_penalty=0` and attnlab's `alpha=0` both rank by the log-probability.
Source vocabulary: {len(src_tokens)} tokens; target: {len(tgt_tokens)}.
"""


# -- Hugging Face transformers -----------------------------------------------------------------


def to_huggingface(model: Any, tokenizers: Any, out_dir: PathLike, *, force: bool = False) -> Path:
    """Write ``model`` as a Hugging Face transformers ``MarianMTModel`` directory, with its
    generation config and a fast tokenizer.

    Args:
        model: an encoder-decoder :class:`attnlab.Transformer` (post-LN, sinusoidal positions,
            LayerNorm epsilon 1e-5; grouped-query attention is exported with each key / value
            head repeated for its query heads).
        tokenizers: its :class:`attnlab.data.tokenizer.Tokenizer`, a ``(src, tgt)`` pair of
            one tokenizer (transformers' fast tokenizer holds one vocabulary), or a model
            directory holding the tokenizer files.
        out_dir: the directory to create.
        force: replace an existing ``out_dir``.

    The weights are permuted on the model dimension so that Marian's position table (sines,
    then cosines) equals attnlab's (interleaved): see the module docstring. The tokenizer is
    attnlab's own ``tokenizer.json``; sources get no BOS / EOS (as attnlab frames them), and
    ``decoder_start_token_id`` is attnlab's BOS. Generation defaults to beam 4 with
    ``length_penalty`` 0.6 and never generates pad or BOS, as attnlab. For training in
    transformers, append ``eos_token_id`` to the tokenizer's target ids (attnlab's targets
    are ``[bos] + ids + [eos]``; the model shifts them right itself): one fast tokenizer frames
    sources and targets alike.

    Returns: ``out_dir``.

    Raises:
        ValueError: an option Marian cannot express; tokenizers that do not match the model.
        FileExistsError: ``out_dir`` exists and ``force`` is False.
    """
    _check_exportable(model, "huggingface")
    src, tgt = _tokenizer_pair(tokenizers)
    c = model.config
    if not _same_tokenizer(src, tgt):
        raise ValueError(
            "tokenizers: Hugging Face (MarianMTModel) export needs one tokenizer for both "
            "sides (a fast tokenizer holds one vocabulary); this model has two"
        )
    tokens = _vocabulary(src, c.vocab_size, "source")
    _vocabulary(tgt, c.target_vocab_size, "target")
    out = _check_out_dir(out_dir, force)
    from safetensors.torch import save_file

    weights = _marian_weights(model)

    def build(directory: Path) -> None:
        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
        _write_json(directory / "config.json", _marian_config(c))
        _write_json(directory / "generation_config.json", _generation_config(c))
        _write_hf_tokenizer(directory, src, tokens, c)

    return atomic_write_dir(out, build)


def marian_permutation(d_model: int) -> Tensor:
    """``(d_model,)`` int64: Marian's dimension ``j`` is attnlab's dimension ``perm[j]`` (the
    even ones, then the odd ones: sines, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _marian_state(model: Any) -> dict[str, Tensor]:
    """attnlab's weights under Marian's names, permuted on the model dimension."""
    c = model.config
    state = _float_state(model)
    perm = marian_permutation(c.d_model)
    group = c.num_heads // (c.num_kv_heads or c.num_heads)
    d, head_dim = c.d_model, c.d_model // c.num_heads
    out: dict[str, Tensor] = {}

    def bias(prefix: str, size: int) -> Tensor:
        b = state.get(f"{prefix}.bias")
        return torch.zeros(size) if b is None else b  # bias=False: zero biases, the same map

    def reads_stream(name: str, prefix: str, rows: slice = slice(None)) -> None:
        """A linear map from the residual stream: permute its input columns."""
        weight = state[f"{prefix}.weight"][rows]
        out[f"{name}.weight"] = weight[:, perm]
        out[f"{name}.bias"] = bias(prefix, state[f"{prefix}.weight"].shape[0])[rows]

    def writes_stream(name: str, prefix: str) -> None:
        """A linear map into the residual stream: permute its output rows."""
        out[f"{name}.weight"] = state[f"{prefix}.weight"][perm]
        out[f"{name}.bias"] = bias(prefix, d)[perm]

    def norm(name: str, prefix: str) -> None:
        out[f"{name}.weight"] = state[f"{prefix}.weight"][perm]
        out[f"{name}.bias"] = state[f"{prefix}.bias"][perm]

    def key_value_heads(name: str) -> None:
        """Repeat each key / value head for the ``group`` query heads that share it (GQA)."""
        if group == 1:
            return
        for part in ("weight", "bias"):
            t = out[f"{name}.{part}"]
            heads = t.reshape(-1, head_dim, *t.shape[1:])
            out[f"{name}.{part}"] = heads.repeat_interleave(group, dim=0).reshape(d, *t.shape[1:])

    def attention(name: str, prefix: str) -> None:
        kv = (c.num_kv_heads or c.num_heads) * head_dim
        reads_stream(f"{name}.q_proj", f"{prefix}.in_proj", slice(0, d))
        reads_stream(f"{name}.k_proj", f"{prefix}.in_proj", slice(d, d + kv))
        reads_stream(f"{name}.v_proj", f"{prefix}.in_proj", slice(d + kv, d + 2 * kv))
        key_value_heads(f"{name}.k_proj")
        key_value_heads(f"{name}.v_proj")
        writes_stream(f"{name}.out_proj", f"{prefix}.out_proj")

    def feed_forward(name: str, prefix: str) -> None:
        reads_stream(f"{name}.fc1", f"{prefix}.ff.linear1")
        writes_stream(f"{name}.fc2", f"{prefix}.ff.linear2")

    source = state["src_embed.token.weight"][:, perm]
    target = state["tgt_embed.token.weight"][:, perm]
    if c.share_embeddings:
        out["model.shared.weight"] = source
    out["model.encoder.embed_tokens.weight"] = source
    out["model.decoder.embed_tokens.weight"] = target
    out["lm_head.weight"] = state["lm_head.weight"][:, perm]
    for i in range(c.num_encoder_layers):
        name, prefix = f"model.encoder.layers.{i}", f"encoder.layers.{i}"
        attention(f"{name}.self_attn", f"{prefix}.self_attn")
        norm(f"{name}.self_attn_layer_norm", f"{prefix}.norm1")
        feed_forward(name, prefix)
        norm(f"{name}.final_layer_norm", f"{prefix}.norm2")
    for i in range(c.num_decoder_layers):
        name, prefix = f"model.decoder.layers.{i}", f"decoder.layers.{i}"
        attention(f"{name}.self_attn", f"{prefix}.self_attn")
        norm(f"{name}.self_attn_layer_norm", f"{prefix}.norm1")
        attention(f"{name}.encoder_attn", f"{prefix}.cross_attn")
        norm(f"{name}.encoder_attn_layer_norm", f"{prefix}.norm2")
        feed_forward(name, prefix)
        norm(f"{name}.final_layer_norm", f"{prefix}.norm3")
    return out


def _marian_weights(model: Any) -> dict[str, Tensor]:
    """What transformers' ``save_pretrained`` would write for the Marian model: each tied
    matrix once, no position tables (Marian computes them), a zero final logits bias."""
    c = model.config
    state = _marian_state(model)
    if c.tie_output:  # transformers ties the decoder's (and with sharing, all) embeddings
        del state["lm_head.weight"]
        if c.share_embeddings:
            del state["model.encoder.embed_tokens.weight"]
            del state["model.decoder.embed_tokens.weight"]
    state["final_logits_bias"] = torch.zeros(1, c.target_vocab_size)
    return {k: v.clone() for k, v in state.items()}  # safetensors stores no shared memory


def _marian_config(config: Any) -> dict[str, Any]:
    """``config.json`` of the Marian model (transformers' ``MarianConfig`` fields)."""
    c = config
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "is_encoder_decoder": True,
        "vocab_size": c.vocab_size,
        "decoder_vocab_size": c.target_vocab_size,
        "share_encoder_decoder_embeddings": c.share_embeddings,
        "tie_word_embeddings": c.tie_output,
        "d_model": c.d_model,
        "encoder_layers": c.num_encoder_layers,
        "decoder_layers": c.num_decoder_layers,
        "encoder_attention_heads": c.num_heads,
        "decoder_attention_heads": c.num_heads,
        "encoder_ffn_dim": c.d_ff,
        "decoder_ffn_dim": c.d_ff,
        "activation_function": _HF_ACTIVATIONS[c.activation],
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "max_position_embeddings": _positions(c),
        "scale_embedding": c.scale_embeddings,
        "init_std": 0.02,
        "pad_token_id": c.pad_id,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "decoder_start_token_id": c.bos_id,
        "forced_eos_token_id": None,
        "is_decoder": False,
        "use_cache": True,
        "dtype": "float32",
    }


def _generation_config(config: Any) -> dict[str, Any]:
    """``generation_config.json``: attnlab's decoding as far as transformers can express it."""
    c = config
    banned = sorted({c.pad_id, c.bos_id} - {c.eos_id})  # attnlab never generates these
    settings = {
        "decoder_start_token_id": c.bos_id,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "forced_eos_token_id": None,
        "max_length": c.max_len,
        # attnlab's translate default (sec. 6.1: beam 4, alpha 0.6); transformers divides by
        # length ** 0.6, not by GNMT's ((5 + length) / 6) ** 0.6
        "num_beams": 4,
        "early_stopping": True,  # stop once num_beams hypotheses have finished, as attnlab
        "length_penalty": 0.6,
    }
    if banned:
        settings["suppress_tokens"] = banned
    return settings


def _write_hf_tokenizer(directory: Path, tokenizer: Any, tokens: list[str], config: Any) -> None:
    """``tokenizer.json`` (attnlab's own file: it adds no BOS / EOS to a text, as attnlab frames
    sources), ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    tokenizer.save(directory / "tokenizer.json")
    special = {
        "bos_token": tokens[config.bos_id],
        "eos_token": tokens[config.eos_id],
        "pad_token": tokens[config.pad_id],
        "unk_token": tokens[tokenizer.unk_id],
    }
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # decode exactly as attnlab
        "split_special_tokens": True,  # "<eos>" in a text is text, as attnlab
        "model_max_length": _positions(config),
        "padding_side": "right",
    }
    _write_json(directory / "tokenizer_config.json", settings)
    _write_json(directory / "special_tokens_map.json", special)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# -- from a model directory --------------------------------------------------------------------


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
    :func:`to_ctranslate2`. Returns ``out_dir``. Checks everything before writing."""
    from . import load_pretrained

    to = _check_target(to)
    if quantization is not None and to != "ctranslate2":
        raise ValueError(f"quantization: only the ctranslate2 target quantizes, not {to}")
    model_path, out_path = Path(model_dir), Path(out_dir)
    if out_path.exists() and out_path.resolve() == model_path.resolve():
        raise ValueError(f"out_dir: {out_path} is the model directory; choose another")
    model = load_pretrained(model_path)
    _check_exportable(model, to)
    tokenizers = _tokenizer_pair(model_path)
    if to == "ctranslate2":
        return to_ctranslate2(model, tokenizers, out_path, quantization=quantization, force=force)
    return to_huggingface(model, tokenizers, out_path, force=force)
