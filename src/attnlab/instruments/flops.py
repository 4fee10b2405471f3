"""FLOP accounting: an exact analytic model of every component, and measured counts.

Two units, always named apart:

* **MACs**, multiply-accumulates: one multiplication and one addition of a matrix product (the
  unit fvcore reports, which it calls "flops");
* **FLOPs**, floating-point operations: ``2 x MACs`` for a matrix product (the unit of
  ``torch.utils.flop_counter``). FLOPs here is a *count*; a rate is FLOP/s. (The tutorial's T5
  calls FLOPs a speed: it is the number of operations, not operations per second.)

The matrix products are the work (Vaswani et al. 2017, sec. 4 and Table 1 count them the same
way). Softmax is listed too, as non-matrix FLOPs (``other_flops``: 5 per score: scale, subtract
the row maximum, exp, sum, divide); counters count no FLOPs for it, so it is kept out of MACs.

Analytic (:func:`attention_costs`, :func:`layer_costs`, :func:`model_costs`) and measured
(:func:`measure`, a ``torch.utils.flop_counter.FlopCounterMode`` that also counts torch's CPU
flash-attention kernels, for which torch registers no formula) agree exactly on the matrix
products; the tests check it for every component.

Conventions of the analytic model:

* causal self-attention is counted as computed: the full ``T x T`` scores (the fused kernel and
  the explicit path both compute every block and then mask; torch's counter counts the same);
* a training step is the forward plus a backward of 2 matrix products per forward product,
  except that the fused attention kernel's backward also recomputes the scores ``Q K^T``
  (5 products against the forward's 2), as ``FlopCounterMode`` counts it;
* embeddings are a table lookup (0 MACs); the pre-softmax projection is ``T x d x V``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .._checks import check_positive_int, check_type

__all__ = [
    "Cost",
    "ModelCost",
    "attention_costs",
    "compare_heads",
    "feed_forward_cost",
    "layer_costs",
    "measure",
    "model_costs",
    "table1",
]

SOFTMAX_FLOPS_PER_SCORE = 5  # scale, subtract max, exp, sum, divide


@dataclass(frozen=True)
class Cost:
    """The cost of one component.

    Attributes:
        name: what it is (``"q_proj"``, ``"scores"``, ...).
        macs: matrix-product multiply-accumulates of the forward pass.
        other_flops: non-matrix FLOPs of the forward pass (softmax), not in ``macs``.
        backward_macs: matrix-product MACs of its backward pass (2x ``macs``; 2.5x for the
            fused attention kernel, which recomputes the scores).
    """

    name: str
    macs: int
    other_flops: int = 0
    backward_macs: int | None = None

    @property
    def flops(self) -> int:
        """Matrix-product FLOPs of the forward pass: ``2 x macs``."""
        return 2 * self.macs

    @property
    def training_macs(self) -> int:
        """Forward + backward matrix-product MACs."""
        return self.macs + (2 * self.macs if self.backward_macs is None else self.backward_macs)

    @property
    def training_flops(self) -> int:
        return 2 * self.training_macs


def _total(costs: list[Cost], attr: str) -> int:
    return sum(getattr(c, attr) for c in costs)


def attention_costs(
    t_q: int,
    t_k: int,
    d_model: int,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    batch: int = 1,
    project_queries: bool = True,
    project_kv: bool = True,
    output_projection: bool = True,
    fused: bool = True,
) -> list[Cost]:
    """Costs of one multi-head attention (sec. 3.2.2), for ``batch`` sequences.

    ``t_q`` queries attend to ``t_k`` keys. Projections: queries ``t_q d^2``, keys and values
    ``t_k d kv_dim`` each (``kv_dim = d H_kv / H``), ``W^O`` ``t_q d^2``. The attention core:
    scores ``Q K^T`` and the weighted sum ``A V``, ``H t_q t_k d_head = t_q t_k d`` each,
    whatever the number of heads (T5, T6: heads split ``d``, they do not multiply the work).
    ``project_kv=False`` leaves out the key/value projections (a KV cache holds them);
    ``output_projection=False`` leaves out ``W^O`` (the tutorial's single-head module);
    ``fused=False`` is the explicit path (weights materialised: a plain 2x backward).
    """
    for value, name in ((t_q, "t_q"), (t_k, "t_k"), (d_model, "d_model")):
        check_positive_int(value, name)
    check_positive_int(num_heads, "num_heads")
    check_positive_int(batch, "batch")
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if d_model % num_heads or num_heads % kv_heads:
        raise ValueError(
            f"num_heads: {num_heads} must divide d_model={d_model}, and num_kv_heads="
            f"{kv_heads} must divide it"
        )
    kv_dim = d_model // num_heads * kv_heads
    b = batch
    core = b * t_q * t_k * d_model
    costs = []
    if project_queries:
        costs.append(Cost("q_proj", b * t_q * d_model * d_model))
    if project_kv:
        costs.append(Cost("k_proj", b * t_k * d_model * kv_dim))
        costs.append(Cost("v_proj", b * t_k * d_model * kv_dim))
    # The fused backward: recompute Q K^T, then dScores = dO V^T, dV = A^T dO, dQ, dK: 5 products.
    costs.append(Cost("scores", core, backward_macs=3 * core if fused else 2 * core))
    costs.append(
        Cost("softmax", 0, other_flops=SOFTMAX_FLOPS_PER_SCORE * b * num_heads * t_q * t_k)
    )
    costs.append(Cost("weighted_sum", core, backward_macs=2 * core))
    if output_projection:
        costs.append(Cost("out_proj", b * t_q * d_model * d_model))
    return costs


def feed_forward_cost(tokens: int, d_model: int, d_ff: int) -> Cost:
    """The position-wise FFN (sec. 3.3, eq. 2): two products, ``2 tokens d d_ff`` MACs."""
    return Cost("ffn", 2 * tokens * d_model * d_ff)


def layer_costs(
    kind: str,
    length: int,
    d_model: int,
    num_heads: int,
    d_ff: int,
    *,
    memory_length: int | None = None,
    num_kv_heads: int | None = None,
    batch: int = 1,
) -> list[Cost]:
    """Costs of one ``"encoder"`` layer (self-attention + FFN) or ``"decoder"`` layer
    (self-attention, cross-attention over ``memory_length`` positions when given, FFN) on
    ``batch`` sequences of ``length`` tokens. Component names get a ``self.`` / ``cross.``
    prefix."""
    if kind not in ("encoder", "decoder"):
        raise ValueError(f"kind: expected 'encoder' or 'decoder', got {kind!r}")
    heads = {"num_kv_heads": num_kv_heads, "batch": batch}
    costs = [
        Cost(f"self.{c.name}", c.macs, c.other_flops, c.backward_macs)
        for c in attention_costs(length, length, d_model, num_heads, **heads)
    ]
    if kind == "decoder" and memory_length is not None:
        costs += [
            Cost(f"cross.{c.name}", c.macs, c.other_flops, c.backward_macs)
            for c in attention_costs(length, memory_length, d_model, num_heads, **heads)
        ]
    costs.append(feed_forward_cost(batch * length, d_model, d_ff))
    return costs


@dataclass
class ModelCost:
    """Costs of a whole model's forward pass, by part and layer.

    Attributes:
        encoder, decoder: one list of :class:`Cost` per layer (empty where the model has none).
        logits: the pre-softmax projection.
        tokens: target (or input) tokens the forward pass predicts or encodes.
    """

    encoder: list[list[Cost]] = field(default_factory=list)
    decoder: list[list[Cost]] = field(default_factory=list)
    logits: Cost | None = None
    tokens: int = 0

    def parts(self) -> list[Cost]:
        every = [c for layer in self.encoder + self.decoder for c in layer]
        return every + ([self.logits] if self.logits is not None else [])

    @property
    def macs(self) -> int:
        return _total(self.parts(), "macs")

    @property
    def flops(self) -> int:
        return 2 * self.macs

    @property
    def other_flops(self) -> int:
        return _total(self.parts(), "other_flops")

    @property
    def training_macs(self) -> int:
        return _total(self.parts(), "training_macs")

    @property
    def training_flops(self) -> int:
        return 2 * self.training_macs

    @property
    def flops_per_token(self) -> float:
        return self.flops / self.tokens


def model_costs(
    config: object,
    *,
    src_len: int,
    tgt_len: int | None = None,
    batch: int = 1,
    model_type: str = "transformer",
) -> ModelCost:
    """The forward pass of a :class:`attnlab.TransformerConfig` model on ``batch`` sequences.

    ``model_type``: ``"transformer"`` (encoder on ``src_len`` tokens, decoder on ``tgt_len``,
    default ``src_len``, with cross-attention, logits for every target token), ``"lm"``
    (decoder without cross-attention on ``src_len`` tokens, logits for each) or ``"encoder"``
    (no logits). ``tokens`` is the number of positions with logits (encoder: encoded tokens).
    """
    from ..models.transformer import TransformerConfig

    check_type(config, TransformerConfig, "config", "a TransformerConfig")
    if model_type not in ("transformer", "lm", "encoder"):
        raise ValueError(
            f"model_type: expected 'transformer', 'lm' or 'encoder', got {model_type!r}"
        )
    check_positive_int(src_len, "src_len")
    tgt_len = src_len if tgt_len is None else tgt_len
    check_positive_int(tgt_len, "tgt_len")
    c = config
    shape = {"num_kv_heads": c.num_kv_heads, "batch": batch}
    result = ModelCost()
    if model_type in ("transformer", "encoder"):
        result.encoder = [
            layer_costs("encoder", src_len, c.d_model, c.num_heads, c.d_ff, **shape)
            for _ in range(c.num_encoder_layers)
        ]
        result.tokens = batch * src_len
    if model_type in ("transformer", "lm"):
        length = tgt_len if model_type == "transformer" else src_len
        memory = src_len if model_type == "transformer" else None
        result.decoder = [
            layer_costs(
                "decoder", length, c.d_model, c.num_heads, c.d_ff, memory_length=memory, **shape
            )
            for _ in range(c.num_decoder_layers)
        ]
        vocab = c.target_vocab_size if model_type == "transformer" else c.vocab_size
        result.logits = Cost("logits", batch * length * c.d_model * vocab)
        result.tokens = batch * length
    return result


def table1(n: int, d: int, *, kernel: int = 3, neighbourhood: int | None = None) -> list[dict]:
    """The per-layer rows of Table 1 of Vaswani et al. (2017) as exact MAC counts for one
    sequence of ``n`` positions of width ``d``.

    * self-attention: the attention core, ``Q K^T`` and ``A V``: ``2 n^2 d`` (the paper's
      ``O(n^2 d)``; its projections ``4 n d^2`` are listed apart);
    * recurrent: ``h_t = tanh(W h_{t-1} + U x_t)``, ``2 n d^2`` (``O(n d^2)``), n sequential steps;
    * convolutional: kernel ``k``, ``d -> d`` channels, ``k n d^2`` (``O(k n d^2)``);
    * self-attention restricted to a neighbourhood of ``r``: ``2 r n d`` (``O(r n d)``).

    Self-attention costs less than the recurrent layer exactly when ``n < d``.
    """
    check_positive_int(n, "n")
    check_positive_int(d, "d")
    check_positive_int(kernel, "kernel")
    r = min(neighbourhood or max(1, int(math.sqrt(n))), n)
    return [
        {"layer": "self-attention", "macs": 2 * n * n * d, "sequential": 1,
         "max_path": 1, "complexity": "O(n^2 d)"},
        {"layer": "self-attention projections", "macs": 4 * n * d * d, "sequential": 1,
         "max_path": 1, "complexity": "O(n d^2)"},
        {"layer": "recurrent", "macs": 2 * n * d * d, "sequential": n,
         "max_path": n, "complexity": "O(n d^2)"},
        {"layer": f"convolutional (k={kernel})", "macs": kernel * n * d * d, "sequential": 1,
         "max_path": math.ceil(math.log(max(n, 2), max(kernel, 2))),
         "complexity": "O(k n d^2)"},
        {"layer": f"self-attention (restricted, r={r})", "macs": 2 * r * n * d,
         "sequential": 1, "max_path": math.ceil(n / r), "complexity": "O(r n d)"},
    ]  # fmt: skip


# -- measured counts -----------------------------------------------------------------------------


def _flash_cpu_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _flash_cpu_backward(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
):
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _cpu_flash_mapping() -> dict:
    """FLOP formulas for torch's CPU flash-attention kernels, which torch's counter lacks (it
    counts them as 0). Their arguments are laid out as the CUDA flash kernels' (q, k, v first;
    the backward's grad_out, q, k, v), so torch's own shape formulas apply."""
    aten = torch.ops.aten
    mapping = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None:
        mapping[forward] = _flash_cpu_forward
    if backward is not None:
        mapping[backward] = _flash_cpu_backward
    return mapping


@dataclass
class Measured:
    """FLOPs counted while running a function: ``flops`` in all, ``by_operator`` (aten name ->
    FLOPs) and ``by_module`` (module path -> FLOPs, as FlopCounterMode attributes them)."""

    flops: int
    by_operator: dict[str, int]
    by_module: dict[str, int]

    @property
    def macs(self) -> int:
        return self.flops // 2


def measure(fn: Callable[[], object]) -> Measured:
    """Run ``fn()`` under ``torch.utils.flop_counter.FlopCounterMode`` extended with the CPU
    flash-attention kernels, and return what it counted (matrix products only)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=_cpu_flash_mapping())
    with counter:
        fn()
    by_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    by_operator = {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return Measured(counter.get_total_flops(), by_operator, by_module)


def compare_heads(
    batch: int = 32,
    seq: int = 1024,
    dim: int = 512,
    heads: int = 8,
    *,
    measured: bool = True,
    seed: int = 0,
) -> dict:
    """The tutorial's experiment (T5, T6): single-head attention without an output projection
    against ``heads``-head attention with ``W^O``, on one random input ``(batch, seq, dim)``.

    The single-head module is :class:`attnlab.MultiHeadAttention` with one head whose
    ``out_proj`` is replaced by ``nn.Identity``; the multi-head module is the standard one. Both
    are counted analytically and (``measured``) by running them under :func:`measure`. The
    difference is exactly ``W^O``: splitting ``d`` into heads changes no product's size.

    Returns ``{"single_head": {"macs", "flops"}, "multi_head": ..., "difference": ...,
    "w_o": ..., "analytic": {...the same from the closed forms...}, "measured": bool}``.
    """
    from ..nn.attention import MultiHeadAttention

    for value, name in ((batch, "batch"), (seq, "seq"), (dim, "dim"), (heads, "heads")):
        check_positive_int(value, name)
    if dim % heads:
        raise ValueError(f"heads: {heads} does not divide dim={dim}")
    single_costs = attention_costs(seq, seq, dim, 1, batch=batch, output_projection=False)
    multi_costs = attention_costs(seq, seq, dim, heads, batch=batch)
    analytic = {
        "single_head": _count(_total(single_costs, "macs")),
        "multi_head": _count(_total(multi_costs, "macs")),
        "w_o": _count(batch * seq * dim * dim),
    }
    analytic["difference"] = _count(
        analytic["multi_head"]["macs"] - analytic["single_head"]["macs"]
    )
    result = dict(analytic)
    if measured:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, seq, dim, generator=gen)
        torch.manual_seed(seed)
        single = MultiHeadAttention(dim, 1).eval()
        single.out_proj = nn.Identity()
        multi = MultiHeadAttention(dim, heads).eval()
        with torch.no_grad():
            counted = {
                "single_head": measure(lambda: single(x)).flops,
                "multi_head": measure(lambda: multi(x)).flops,
                "w_o": measure(lambda: multi.out_proj(x)).flops,
            }
        result = {name: _count(flops // 2) for name, flops in counted.items()}
        result["difference"] = _count(result["multi_head"]["macs"] - result["single_head"]["macs"])
    result = {k: result[k] for k in ("single_head", "multi_head", "difference", "w_o")}
    result["analytic"] = analytic
    result["measured"] = measured
    result["input_shape"] = [batch, seq, dim]
    result["heads"] = heads
    return result


def _count(macs: int) -> dict[str, int]:
    return {"macs": int(macs), "flops": 2 * int(macs)}
