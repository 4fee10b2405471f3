"""attnlab's encoder-decoder as a Hugging Face transformers ``MarianMTModel`` directory: the
weights permuted on the model dimension so that Marian's position table is attnlab's, the
config, the generation config and attnlab's tokenizer as a fast tokenizer. Written directly
(safetensors and JSON): exporting needs no transformers, running it does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._io import atomic_write_dir, read_json
from .common import (
    MARIAN_LAYER_NORM_EPS,
    PathLike,
    check_exportable,
    check_out_dir,
    float_state,
    positions,
    same_tokenizer,
    tokenizer_pair,
    vocabulary,
)

if TYPE_CHECKING:
    from ..decode.options import DecodingOptions

__all__ = [
    "from_huggingface",
    "import_marian",
    "marian_permutation",
    "read_marian_config",
    "read_marian_weights",
    "to_huggingface",
]


# -- the name map: Marian's parameter names against attnlab's, and the permutation, read by
# both directions -------------------------------------------------------------------------


#: attnlab's activation -> Marian's name for it (the export writes these).
ACTIVATIONS_OUT = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_pytorch_tanh",
    "silu": "swish",
}
#: Marian's activation names -> attnlab's (transformers' ACT2FN names for the same functions).
ACTIVATIONS_IN = {
    "relu": "relu",
    "gelu": "gelu",
    "swish": "silu",
    "silu": "silu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
#: Marian's output bias, ``(1, target_vocab_size)``: attnlab's ``lm_head.bias`` (or zeros).
LOGITS_BIAS = "final_logits_bias"


def marian_permutation(d_model: int) -> Tensor:
    """``(d_model,)`` int64: Marian's dimension ``j`` is attnlab's dimension ``perm[j]`` (the
    even ones, then the odd ones: sines, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


@dataclass(frozen=True)
class Entry:
    """One tensor of the name map: Marian's ``marian`` is attnlab's ``attnlab`` (its ``rows``
    where attnlab fuses the query, key and value projections into one ``in_proj``), with the
    model dimension permuted on ``axis`` (None: a tensor that does not touch the stream)."""

    marian: str
    attnlab: str
    axis: int | None
    rows: slice | None = None


def name_map(config: Any) -> list[Entry]:
    """Every tensor of a Marian model and the attnlab tensor it is: the one table that both
    :func:`~attnlab.formats.marian.to_huggingface` and
    :func:`~attnlab.formats.marian.from_huggingface` read. Tied matrices appear under each
    of their names (Marian's ``model.shared``, encoder and decoder embeddings, ``lm_head``)."""
    c = config
    d, head_dim = c.d_model, c.d_model // c.num_heads
    kv = (c.num_kv_heads or c.num_heads) * head_dim
    entries: list[Entry] = []

    def reads_stream(name: str, prefix: str, rows: slice | None = None) -> None:
        """A linear map from the residual stream: its input columns are permuted."""
        entries.append(Entry(f"{name}.weight", f"{prefix}.weight", 1, rows))
        entries.append(Entry(f"{name}.bias", f"{prefix}.bias", None, rows))

    def writes_stream(name: str, prefix: str) -> None:
        """A linear map into the residual stream: its output rows are permuted."""
        entries.append(Entry(f"{name}.weight", f"{prefix}.weight", 0))
        entries.append(Entry(f"{name}.bias", f"{prefix}.bias", 0))

    norm = writes_stream  # a LayerNorm's weight and bias lie along the stream, permuted alike

    def attention(name: str, prefix: str) -> None:
        reads_stream(f"{name}.q_proj", f"{prefix}.in_proj", slice(0, d))
        reads_stream(f"{name}.k_proj", f"{prefix}.in_proj", slice(d, d + kv))
        reads_stream(f"{name}.v_proj", f"{prefix}.in_proj", slice(d + kv, d + 2 * kv))
        writes_stream(f"{name}.out_proj", f"{prefix}.out_proj")

    def feed_forward(name: str, prefix: str) -> None:
        reads_stream(f"{name}.fc1", f"{prefix}.ff.linear1")
        writes_stream(f"{name}.fc2", f"{prefix}.ff.linear2")

    if c.share_embeddings:
        entries.append(Entry("model.shared.weight", "src_embed.token.weight", 1))
    entries.append(Entry("model.encoder.embed_tokens.weight", "src_embed.token.weight", 1))
    entries.append(Entry("model.decoder.embed_tokens.weight", "tgt_embed.token.weight", 1))
    entries.append(Entry("lm_head.weight", "lm_head.weight", 1))
    if c.output_bias:
        entries.append(Entry(LOGITS_BIAS, "lm_head.bias", None))
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
    return entries


def to_huggingface(
    model: Any,
    tokenizers: Any,
    out_dir: PathLike,
    *,
    force: bool = False,
    decoding: DecodingOptions | None = None,
) -> Path:
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
    from ..data.marian_files import to_marian_dir

    check_exportable(model, "huggingface")
    src, tgt = tokenizer_pair(tokenizers)
    c = model.config
    # An imported Marian model's SentencePiece tokenizers go back out as Marian's own files
    # (MarianTokenizer); attnlab's BPE goes out as a fast tokenizer, which holds one vocabulary.
    sentencepiece = [t.kind == "sentencepiece" for t in (src, tgt)]
    if any(sentencepiece) and not all(sentencepiece):
        raise ValueError("tokenizers: one SentencePiece and one BPE tokenizer; expected one kind")
    if not sentencepiece[0] and not same_tokenizer(src, tgt):
        raise ValueError(
            "tokenizers: Hugging Face (MarianMTModel) export needs one tokenizer for both "
            "sides (a fast tokenizer holds one vocabulary); this model has two"
        )
    tokens = vocabulary(src, c.vocab_size, "source")
    vocabulary(tgt, c.target_vocab_size, "target")
    out = check_out_dir(out_dir, force)
    from .._tensorfile import save_safetensors

    weights = _marian_weights(model)

    def build(directory: Path) -> None:
        save_safetensors(weights, directory / "model.safetensors", {"format": "pt"})
        _write_json(directory / "config.json", _marian_config(c))
        _write_json(directory / "generation_config.json", _generation_config(c, decoding))
        if sentencepiece[0]:
            to_marian_dir(directory, src, tgt)
        else:
            _write_tokenizer(directory, src, tokens, c)

    return atomic_write_dir(out, build)


def _marian_state(model: Any) -> dict[str, Tensor]:
    """attnlab's weights under Marian's names, permuted on the model dimension."""
    c = model.config
    state = float_state(model)
    perm = marian_permutation(c.d_model)
    group = c.num_heads // (c.num_kv_heads or c.num_heads)
    d, head_dim = c.d_model, c.d_model // c.num_heads
    out: dict[str, Tensor] = {}
    for entry in name_map(c):
        if entry.attnlab in state:
            t = state[entry.attnlab]
        else:  # bias=False: zero biases are the same map
            weight = state[entry.attnlab.removesuffix(".bias") + ".weight"]
            t = torch.zeros(weight.shape[0])
        if entry.rows is not None:
            t = t[entry.rows]
        if entry.axis is not None:
            t = t.index_select(entry.axis, perm)
        if entry.marian == LOGITS_BIAS:
            t = t.reshape(1, -1)
        out[entry.marian] = t
    if group > 1:  # grouped-query attention: each key / value head repeated for its queries
        for name in [n for n in out if n.endswith((".k_proj.weight", ".k_proj.bias"))]:
            for part in (name, name.replace(".k_proj.", ".v_proj.")):
                t = out[part]
                heads = t.reshape(-1, head_dim, *t.shape[1:])
                out[part] = heads.repeat_interleave(group, dim=0).reshape(d, *t.shape[1:])
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
    if not c.output_bias:  # Marian always has one: zeros are the paper's model
        state[LOGITS_BIAS] = torch.zeros(1, c.target_vocab_size)
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
        "activation_function": ACTIVATIONS_OUT[c.activation],
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "max_position_embeddings": positions(c),
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


def _generation_config(config: Any, decoding: DecodingOptions | None = None) -> dict[str, Any]:
    """``generation_config.json``: ``decoding`` (default the paper's beam 4 and alpha 0.6) as
    far as transformers can express it."""
    from ..decode.options import DecodingOptions

    c = config
    decoding = decoding or DecodingOptions()
    banned = sorted({c.pad_id, c.bos_id} - {c.eos_id})  # attnlab never generates these
    settings = {
        "decoder_start_token_id": c.bos_id,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id,
        "forced_eos_token_id": None,
        "max_length": c.max_len,
        # the model's own beam and alpha; transformers divides by length ** alpha, not by
        # GNMT's ((5 + length) / 6) ** alpha
        "num_beams": decoding.beam_size,
        "early_stopping": "never",  # stop when no live hypothesis can win, as attnlab
        "length_penalty": decoding.alpha,
    }
    if banned:
        settings["suppress_tokens"] = banned
    return settings


def _write_tokenizer(directory: Path, tokenizer: Any, tokens: list[str], config: Any) -> None:
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
        "model_max_length": positions(config),
        "padding_side": "right",
    }
    _write_json(directory / "tokenizer_config.json", settings)
    _write_json(directory / "special_tokens_map.json", special)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# -- import: a transformers Marian directory into attnlab -------------------------------------

#: MarianConfig's defaults (transformers), for fields a config.json leaves out.
_MARIAN_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
#: Fields of related configs (BART, mBART, FSMT) whose non-default value is a layer or an
#: order attnlab's post-LN Transformer lacks: refused by name rather than ignored.
_NOT_REPRESENTABLE = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}
#: Tensors a Marian checkpoint may hold that attnlab computes itself (its position tables).
_COMPUTED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")


def read_marian_config(directory: PathLike) -> Any:
    """The :class:`attnlab.TransformerConfig` of the Marian checkpoint in ``directory``
    (its ``config.json``), or a one-line error naming the field attnlab cannot represent.

    Marian is the paper's post-LN encoder-decoder with sinusoidal positions (its table lays
    the sines before the cosines: see the module docstring) and these differences, each a
    config option: ``final_logits_bias`` (``output_bias``), the activation (``silu`` for
    swish), ``scale_embedding`` (``scale_embeddings``), the decoder starting from the pad
    token (``bos_id = pad_id = decoder_start_token_id``), eos id 0 and pad the last id, and
    separate source and target vocabularies (``share_encoder_decoder_embeddings``).

    Raises:
        FileNotFoundError: no ``config.json``.
        ValueError: not a Marian config, or a field attnlab cannot represent (named).
    """
    from ..models.config import TransformerConfig

    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{Path(directory)}: no config.json; expected a transformers Marian (opus-mt) model "
            f"directory"
        )
    raw = read_json(path)
    if raw.get("model_type") != "marian":
        raise ValueError(
            f"{path}: model_type={raw.get('model_type')!r}; attnlab imports transformers Marian "
            f"models (model_type 'marian', MarianMTModel) only"
        )
    for field, fine in _NOT_REPRESENTABLE.items():
        if field in raw and raw[field] != fine:
            raise ValueError(
                f"{path}: {field}={raw[field]!r}: attnlab's post-LN Transformer cannot represent "
                f"it (expected {fine!r})"
            )
    m = {**_MARIAN_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    for name in ("ffn_dim", "attention_heads"):
        if m[f"decoder_{name}"] != m[f"encoder_{name}"]:
            raise ValueError(
                f"{path}: decoder_{name}={m[f'decoder_{name}']} differs from encoder_{name}="
                f"{m[f'encoder_{name}']}; attnlab's encoder and decoder share one width"
            )
    activation = m["activation_function"]
    if activation not in ACTIVATIONS_IN:
        raise ValueError(
            f"{path}: activation_function={activation!r}; attnlab has {sorted(ACTIVATIONS_IN)}"
        )
    eos = m["eos_token_id"]
    if isinstance(eos, list):
        if len(eos) != 1:
            raise ValueError(f"{path}: eos_token_id={eos!r}; attnlab has one end-of-sentence id")
        eos = eos[0]
    shared = bool(m["share_encoder_decoder_embeddings"])
    target = m["decoder_vocab_size"] or m["vocab_size"]
    options = {
        "vocab_size": m["vocab_size"],
        "tgt_vocab_size": None if shared else target,
        "d_model": m["d_model"],
        "num_heads": m["encoder_attention_heads"],
        "d_ff": m["encoder_ffn_dim"],
        "num_encoder_layers": m["encoder_layers"],
        "num_decoder_layers": m["decoder_layers"],
        "dropout": float(m["dropout"]),
        "attention_dropout": float(m["attention_dropout"]),
        "activation_dropout": float(m["activation_dropout"]),
        "activation": ACTIVATIONS_IN[activation],
        "norm_first": False,
        "layer_norm_eps": MARIAN_LAYER_NORM_EPS,
        "positional": "sinusoidal",
        "max_len": m["max_position_embeddings"],
        "share_embeddings": shared,
        "tie_output": bool(m["tie_word_embeddings"]),
        "output_bias": True,
        "scale_embeddings": bool(m["scale_embedding"]),
        "pad_id": m["pad_token_id"],
        "bos_id": m["decoder_start_token_id"],
        "eos_id": eos,
    }
    try:
        return TransformerConfig(**options)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def read_marian_weights(directory: PathLike) -> dict[str, Tensor]:
    """The tensors of a Marian checkpoint, in float32 (fp16 / bf16 weights are widened):
    ``model.safetensors``, else ``pytorch_model.bin`` read with torch's weights-only loader
    (never plain pickle)."""
    directory = Path(directory)
    safetensors_path, pickle_path = (directory / name for name in WEIGHTS_FILES)
    if safetensors_path.is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(safetensors_path))
        except (SafetensorError, OSError, ValueError) as error:
            raise ValueError(
                f"{safetensors_path}: not a readable safetensors file ({error})"
            ) from None
    elif pickle_path.is_file():
        try:
            state = torch.load(pickle_path, map_location="cpu", weights_only=True)
        except Exception as error:  # the weights-only unpickler raises several kinds
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ValueError(
                f"{pickle_path}: not readable with torch's weights-only loader ({first})"
            ) from None
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
    else:
        raise FileNotFoundError(
            f"{directory}: no model.safetensors or pytorch_model.bin (the model's weights)"
        )
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"{directory}: the weights file does not hold a dict of tensors")
    return {name: t.to(torch.float32) for name, t in state.items()}


def _resolve_tied(state: dict[str, Tensor], config: Any, where: Path) -> dict[str, Tensor]:
    """Every embedding name Marian may tie, present: transformers writes a tied matrix once
    (under one of its names) and, when it loads, ties the others to it whatever else was
    stored; so does this."""
    full = dict(state)
    encoder, decoder = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"
    if config.share_embeddings:
        names = ("model.shared.weight", encoder, decoder, "lm_head.weight")
        stored = next((state[n] for n in names if n in state), None)
        if stored is None:
            raise ValueError(f"{where}: no model.shared.weight (the shared embeddings)")
        for name in names[:3]:
            full[name] = stored
    if config.tie_output:
        if decoder not in full:
            raise ValueError(f"{where}: no {decoder!r}")
        full["lm_head.weight"] = full[decoder]
    return full


def from_huggingface(directory: PathLike) -> Any:
    """The attnlab :class:`attnlab.Transformer` of the transformers Marian checkpoint in
    ``directory`` (``config.json`` and its weights): the same function, every weight
    permuted on the model dimension by :func:`marian_permutation`'s inverse (the name map,
    :func:`name_map`, is the one :func:`to_huggingface` writes
    by). Tokenizers: :func:`import_marian`.

    Raises:
        FileNotFoundError: ``config.json`` or the weights are missing.
        ValueError: a field attnlab cannot represent, or a tensor missing, unexpected or of
            the wrong shape (each named).
    """
    from ..models.transformer import Transformer

    directory = Path(directory)
    config = read_marian_config(directory)
    stored = read_marian_weights(directory)
    safetensors = (directory / WEIGHTS_FILES[0]).is_file()
    where = directory / WEIGHTS_FILES[0 if safetensors else 1]
    state = _resolve_tied(stored, config, where)
    if not config.output_bias or LOGITS_BIAS not in state:
        state[LOGITS_BIAS] = torch.zeros(1, config.target_vocab_size)
    entries = name_map(config)
    known = {e.marian for e in entries} | set(_COMPUTED)
    unexpected = sorted(set(state) - known)
    if unexpected:
        raise ValueError(
            f"{where}: holds {unexpected[0]!r}, which attnlab's Transformer has no place for "
            f"({len(unexpected)} such tensors)"
        )
    model = Transformer(config)
    target = model.state_dict()
    inverse = torch.argsort(marian_permutation(config.d_model))
    # attnlab name -> {first row: tensor}; a tied matrix's other Marian names give the same
    # tensor again (the first is kept), fused q / k / v projections their row ranges.
    pieces: dict[str, dict[int, Tensor]] = {}
    for entry in entries:
        if entry.marian not in state:
            raise ValueError(f"{where}: no {entry.marian!r}")
        t = state[entry.marian]
        if entry.marian == LOGITS_BIAS:
            t = t.reshape(-1)
        if entry.axis is not None:
            if t.dim() <= entry.axis or t.shape[entry.axis] != config.d_model:
                raise ValueError(
                    f"{where}: {entry.marian!r} has shape {tuple(t.shape)}; expected d_model="
                    f"{config.d_model} on dimension {entry.axis}"
                )
            t = t.index_select(entry.axis, inverse)
        start = 0 if entry.rows is None else entry.rows.start
        pieces.setdefault(entry.attnlab, {}).setdefault(start, t)
    loaded: dict[str, Tensor] = {}
    for name, parts in pieces.items():
        t = torch.cat([parts[start] for start in sorted(parts)], dim=0)
        if name not in target or target[name].shape != t.shape:
            expected = tuple(target[name].shape) if name in target else "none"
            raise ValueError(
                f"{where}: the tensors for attnlab's {name!r} have shape {tuple(t.shape)}, "
                f"expected {expected} from config.json"
            )
        loaded[name] = t.contiguous()
    missing = sorted(set(target) - set(loaded))
    if missing:
        raise ValueError(f"{where}: nothing maps to attnlab's {missing[0]!r}")
    model.load_state_dict(loaded)
    return model.eval()


def import_marian(marian_dir: PathLike, out_dir: PathLike, *, overwrite: bool = False) -> Path:
    """Import the transformers Marian (opus-mt) directory ``marian_dir`` as an ordinary
    attnlab model directory ``out_dir``: ``config.json`` + ``model.safetensors`` (the
    :func:`from_huggingface` model) and the SentencePiece tokenizers
    (:class:`attnlab.data.sentencepiece.SentencePieceTokenizer`, from ``source.spm``,
    ``target.spm`` and ``vocab.json``). ``translate``, ``evaluate``, ``serve``, ``viz``,
    ``explain``, ``export`` and ``train --init-from`` take it.

    Everything is read and checked before anything is written, and the directory is written
    as one unit (a failure leaves no ``out_dir``). Returns ``out_dir``.

    Raises:
        FileNotFoundError: a required file of ``marian_dir`` is missing (named).
        FileExistsError: ``out_dir`` exists and ``overwrite`` is False.
        ValueError: what attnlab cannot represent, or files that do not belong together.
    """
    from ..data.marian_files import from_marian_dir
    from ..data.tokenizer import save_tokenizers

    source = Path(marian_dir)
    if not source.is_dir():
        raise FileNotFoundError(f"marian_dir: {source}: no such directory")
    out = check_out_dir(out_dir, overwrite)
    if out.exists() and out.resolve() == source.resolve():
        raise ValueError(f"out_dir: {out} is the Marian directory; choose another")
    model = from_huggingface(source)
    src, tgt = from_marian_dir(source)
    c = model.config
    for side, tokenizer, size in (
        ("source", src, c.vocab_size),
        ("target", tgt, c.target_vocab_size),
    ):
        if tokenizer.vocab_size != size:
            raise ValueError(
                f"{source}: the {side} vocabulary has {tokenizer.vocab_size:,} tokens, but "
                f"config.json's {side} vocabulary has {size:,}"
            )
        for name in ("pad_id", "eos_id"):
            if getattr(tokenizer, name) != getattr(c, name):
                raise ValueError(
                    f"{source}: the {side} tokenizer's {name} is {getattr(tokenizer, name)}, "
                    f"config.json's is {getattr(c, name)}"
                )

    def build(directory: Path) -> None:
        model.write_files(directory)
        save_tokenizers(directory, src, tgt)

    return atomic_write_dir(out, build)
