"""Measure a decoding step whose shapes never change, compiled, against attnlab's eager step.

Issue 28 (section 1) asks whether a shape-stable decoding step, compiled by ``torch.compile``,
decodes faster than the eager fast step (:class:`attnlab.decode.fast.FastDecoder`, what
``attnlab translate`` runs). This script builds such a step and measures it; the library does
not use it unless this measures it faster.

:class:`StaticStep` holds one decoder's weights as parameters, a key/value store preallocated
for ``capacity`` positions and the memory's keys and values padded to ``source_capacity``
tokens. The position comes in as a tensor; self-attention runs over the whole store with a
mask of the positions written so far, and cross-attention over the padded memory with a mask
of the real tokens. Every step therefore has the same shapes, from the first token to the
last, and a compiled step compiles once per batch size (:func:`compilations` counts them).
Scope: one row per sentence (greedy decoding and sampling), the paper's sinusoidal or learned
positions (no RoPE or ALiBi), float32.

What is checked before timing, on the decode benchmark's model (``benchmarks/decode.py``: d_model
256, 4 heads, 3 + 3 layers, d_ff 1024, 8,000 tokens, random weights): the static step's logits
against the fast step's at every position (within 1e-5) and the greedy tokens (identical), eager
and compiled. Then greedy decoding of 32-token sources, 128 new tokens, at batch 1 and 32, with
the same search loop for every contender, interleaved in one process:

* ``fast``: the eager fast step (the anchor);
* ``static``: the static step, eager;
* ``inductor``: the static step compiled with inductor's defaults;
* ``freezing``: with weight freezing (constants folded, weights prepacked for oneDNN);
* ``autotune``: freezing and ``max_autotune`` (inductor's C++ GEMM templates measured against
  the library's kernels);
* ``cpp_wrapper``: freezing and a C++ wrapper instead of the Python one.

Ratios are each contender's tokens/s over the fast step's, medians of the repetitions; the first
call of each compiled contender is timed apart (the compile). Run::

    .venv/bin/python benchmarks/static_decode.py            # full run (about 15 minutes)
    .venv/bin/python benchmarks/static_decode.py --quick    # smoke run: tiny model, inductor only

JSON: ``benchmarks/results/static_decode.json`` (or ``--out``).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attnlab
from attnlab.decode.fast import FastDecoder, why_not_fast_path
from attnlab.nn.layers import ACTIVATIONS
from attnlab.train.step import why_not_compile
from common import Row, base_parser, finish, interleaved, print_table, summary

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "static_decode.json"
PAD, BOS, EOS = 0, 1, 2
VARIANTS: dict[str, dict[str, Any]] = {
    "inductor": {},
    "freezing": {"freezing": True},
    "autotune": {"freezing": True, "max_autotune": True},
    "cpp_wrapper": {"freezing": True, "cpp_wrapper": True},
}


def _t(weight: Tensor) -> nn.Parameter:
    """A weight ``(out, in)`` stored as ``(in, out)``, for ``addmm(bias, x, w)``."""
    return nn.Parameter(weight.detach().t().contiguous(), requires_grad=False)


def _p(tensor: Tensor | None) -> nn.Parameter | None:
    return None if tensor is None else nn.Parameter(tensor.detach().clone(), requires_grad=False)


def _linear(x: Tensor, weight_t: Tensor, bias: Tensor | None) -> Tensor:
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


def why_not_static(model: attnlab.Transformer) -> str:
    """Why :class:`StaticStep` cannot run ``model``: one line, or "" when it can."""
    reason = why_not_fast_path(model)
    if reason:
        return reason
    c = model.config
    if c.positional not in ("sinusoidal", "learned", "none"):
        return f"positional={c.positional!r}: the static step has sinusoidal or learned positions"
    if any(p.dtype != torch.float32 for p in model.parameters()):
        return "the static step runs float32 models"
    return ""


class StaticStep(nn.Module):
    """One decoding step of ``model`` for ``rows`` sentences, with shapes that never change.

    :meth:`start` takes the encoder's output; :meth:`forward` ``(ids (rows,), position (1,))``
    feeds one token per row at ``position`` and returns the next-token logits ``(rows, V)``.
    The weights are laid out as :mod:`attnlab.decode.fast` packs them, but held as parameters of
    this module: inductor's freezing folds a module's parameters, not tensors in closures.
    """

    def __init__(
        self, model: attnlab.Transformer, rows: int, capacity: int, source_capacity: int
    ) -> None:
        super().__init__()
        reason = why_not_static(model)
        if reason:
            raise ValueError(f"model: {reason}")
        c, layers = model.config, list(model.decoder.layers)
        first = layers[0].self_attn
        d, kv = c.d_model, first.kv_dim
        self.rows, self.capacity, self.source_capacity = rows, capacity, source_capacity
        self.d, self.kv, self.kv_heads, self.head_dim = d, kv, first.num_kv_heads, first.head_dim
        self.group = first.num_heads // first.num_kv_heads
        self.norm_first = layers[0].norm_first
        self.activation = ACTIVATIONS[layers[0].ff.activation]  # relu, gelu, gelu_tanh, silu
        scale = 1.0 / math.sqrt(first.head_dim)  # folded into the query rows, as the fast step
        with torch.no_grad():
            self.layers = nn.ModuleList()
            cross_w, cross_b = [], []
            for layer in layers:
                a, x = layer.self_attn, layer.cross_attn
                w, b = a.in_proj.weight, a.in_proj.bias
                m = nn.Module()
                m.qkv_w = _t(torch.cat([w[:d] * scale, w[d:]]))
                m.qkv_b = _p(None if b is None else torch.cat([b[:d] * scale, b[d:]]))
                m.out_w, m.out_b = _t(a.out_proj.weight), _p(a.out_proj.bias)
                w, b = x.in_proj.weight, x.in_proj.bias
                m.q_w, m.q_b = _t(w[:d] * scale), _p(None if b is None else b[:d] * scale)
                cross_w.append(w[d:])
                cross_b.append(None if b is None else b[d:])
                m.cross_out_w, m.cross_out_b = _t(x.out_proj.weight), _p(x.out_proj.bias)
                m.ff1_w, m.ff1_b = _t(layer.ff.linear1.weight), _p(layer.ff.linear1.bias)
                m.ff2_w, m.ff2_b = _t(layer.ff.linear2.weight), _p(layer.ff.linear2.bias)
                m.norms = nn.ModuleList([layer.norm1, layer.norm2, layer.norm3])
                self.layers.append(m)
            self.cross_kv_w = _t(torch.cat(cross_w))
            self.cross_kv_b = None if cross_b[0] is None else _p(torch.cat(cross_b))
            self.final_norm = model.decoder.norm
            self.head_w, self.head_b = _t(model.lm_head.weight), _p(model.lm_head.bias)
            embed = model.tgt_embed
            self.token = _p(embed.token.weight)
            self.scale = float(embed.scale)
            self.embedding_norm = embed.norm
            positions = None
            if c.positional == "sinusoidal":
                positions = embed.position.table(capacity, dtype=torch.float32)
            elif c.positional == "learned":
                positions = embed.position.weight[:capacity]
            self.positions = _p(positions)
        n_layers, kvh, dh = len(layers), self.kv_heads, self.head_dim
        # The store: zeros, so that a slot not yet written is finite (its weight is then 0).
        # One buffer per layer and kind: a compiled step then writes its slot in place (a
        # write into a view of one larger buffer was compiled as a copy of the whole store).
        for index in range(n_layers):
            self.register_buffer(f"keys{index}", torch.zeros(rows * kvh, capacity, dh))
            self.register_buffer(f"values{index}", torch.zeros(rows * kvh, capacity, dh))
        self.n_layers = n_layers
        self.register_buffer(
            "memory_keys_t", torch.zeros(n_layers, rows * kvh, dh, source_capacity)
        )
        self.register_buffer(
            "memory_values", torch.zeros(n_layers, rows * kvh, source_capacity, dh)
        )
        self.register_buffer("memory_bias", torch.zeros(rows, 1, source_capacity))
        self.register_buffer("slots", torch.arange(capacity))

    @torch.no_grad()
    def start(self, memory: Tensor, memory_mask: Tensor | None) -> None:
        """Take a new batch's encoder output ``(rows, S, d)`` (``S <= source_capacity``) and its
        key mask ``(rows, 1, 1, S)`` (or None): the memory's keys and values, padded."""
        rows, s, d = memory.shape
        if rows != self.rows or s > self.source_capacity:
            raise ValueError(
                f"memory: expected ({self.rows}, <= {self.source_capacity}, {self.d}), "
                f"got {tuple(memory.shape)}"
            )
        layers, kvh, dh = self.n_layers, self.kv_heads, self.head_dim
        kv = _linear(memory.reshape(rows * s, d), self.cross_kv_w, self.cross_kv_b)
        kv = kv.view(rows, s, layers, 2, kvh, dh).permute(2, 3, 0, 4, 1, 5)
        kv = kv.reshape(layers, 2, rows * kvh, s, dh)
        self.memory_keys_t.zero_()
        self.memory_values.zero_()
        self.memory_keys_t[:, :, :, :s].copy_(kv[:, 0].transpose(2, 3))
        self.memory_values[:, :, :s].copy_(kv[:, 1])
        self.memory_bias.fill_(-math.inf)
        if memory_mask is None:
            self.memory_bias[:, :, :s] = 0.0
        else:
            real = memory_mask.reshape(rows, 1, s)
            self.memory_bias[:, :, :s].masked_fill_(real, 0.0)

    def forward(self, ids: Tensor, position: Tensor) -> Tensor:
        rows, d, kvh, dh, group = self.rows, self.d, self.kv_heads, self.head_dim, self.group
        x = F.embedding(ids, self.token)
        if self.positions is not None:
            x = torch.add(self.positions.index_select(0, position), x, alpha=self.scale)
        elif self.scale != 1.0:
            x = x * self.scale
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        # 0 for the slots written so far (this one included), -inf for the rest.
        visible = torch.zeros(self.capacity, dtype=x.dtype, device=x.device)
        visible = visible.masked_fill(self.slots > position, -math.inf)
        pre = self.norm_first
        for index, w in enumerate(self.layers):
            norm1, norm2, norm3 = w.norms
            qkv = _linear(norm1(x) if pre else x, w.qkv_w, w.qkv_b)  # (rows, d + 2 kv)
            q = qkv[:, :d].reshape(rows * kvh, group, dh)
            new_k = qkv[:, d : d + self.kv].reshape(rows * kvh, 1, dh)
            new_v = qkv[:, d + self.kv :].reshape(rows * kvh, 1, dh)
            keys, values = getattr(self, f"keys{index}"), getattr(self, f"values{index}")
            keys[:, position] = new_k  # index_put_: compiled in place, not copy and back
            values[:, position] = new_v
            scores = torch.bmm(q, keys.transpose(1, 2)) + visible
            a = torch.bmm(torch.softmax(scores, -1), values).reshape(rows, d)
            out = _linear(a, w.out_w, w.out_b) + x
            x = out if pre else norm1(out)
            q = _linear(norm2(x) if pre else x, w.q_w, w.q_b).reshape(rows * kvh, group, dh)
            scores = torch.bmm(q, self.memory_keys_t[index])  # (rows kvh, group, S)
            scores = (scores.view(rows, kvh * group, -1) + self.memory_bias).view(scores.shape)
            a = torch.bmm(torch.softmax(scores, -1), self.memory_values[index]).reshape(rows, d)
            out = _linear(a, w.cross_out_w, w.cross_out_b) + x
            x = out if pre else norm2(out)
            h = _linear(norm3(x) if pre else x, w.ff1_w, w.ff1_b)
            h = self.activation(h)
            out = _linear(h, w.ff2_w, w.ff2_b) + x
            x = out if pre else norm3(out)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return _linear(x, self.head_w, self.head_b)


@dataclass(frozen=True)
class Plan:
    new_tokens: int
    source_length: int
    batches: tuple[int, ...]
    reps: int
    variants: tuple[str, ...]


# -- decoding with either step -----------------------------------------------------------------

Step = Callable[[Tensor, int], Tensor]


def greedy(step: Step, rows: int, new_tokens: int) -> Tensor:
    """``new_tokens`` greedy tokens per row (BOS first; PAD, BOS and EOS banned, so every row
    runs the full length): ``(rows, new_tokens)``."""
    ids = torch.full((rows,), BOS, dtype=torch.long)
    out = []
    for t in range(new_tokens):
        logits = step(ids, t)
        logits[:, (PAD, BOS, EOS)] = -math.inf
        ids = logits.argmax(-1)
        out.append(ids)
    return torch.stack(out, 1)


def fast_step(model: attnlab.Transformer, src: Tensor, capacity: int) -> Step:
    """The eager fast step (a new decoder for ``src``)."""
    decoder = FastDecoder(
        model, model.encode(src), model.source_mask(src), beam=1, capacity=capacity
    )
    return lambda ids, t: decoder.step(ids)


def static_step(
    model: attnlab.Transformer, module: StaticStep, run: Callable[..., Tensor], src: Tensor
) -> Step:
    """``module`` (compiled or not: ``run``) started on ``src``; positions as tensors."""
    module.start(model.encode(src), model.source_mask(src))
    positions = [torch.tensor([t]) for t in range(module.capacity)]
    return lambda ids, t: run(ids, positions[t])


def compile_step(module: StaticStep, options: dict[str, Any] | None, backend: Any = "inductor"):
    """``torch.compile`` of ``module`` with fixed shapes (one graph per batch size)."""
    return torch.compile(module, backend=backend, dynamic=False, options=options or None)


def compilations(model: attnlab.Transformer, rows: tuple[int, ...], positions: int) -> int:
    """How many graphs dynamo compiles for greedy decoding at each of ``rows`` (one static step
    per batch size, ``positions`` steps each): one per batch size when nothing recompiles."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    for n in rows:
        module = StaticStep(model, n, positions, 8)
        run = compile_step(module, None, backend=counter)
        src = torch.randint(4, model.config.vocab_size, (n, 8))
        greedy(static_step(model, module, run, src), n, positions)
    return counter.frame_count


def fast_reference(
    model: attnlab.Transformer, src: Tensor, steps: int
) -> tuple[list[Tensor], Tensor]:
    """One greedy decode of ``src`` ``(rows, S)`` with the fast step: its logits ``(rows, V)``
    at each of ``steps`` positions, and its tokens ``(rows, steps)``."""
    fast, logits = fast_step(model, src, steps), []

    def step(ids: Tensor, t: int) -> Tensor:
        out = fast(ids, t)
        logits.append(out.clone())  # greedy bans tokens in place in what it is given
        return out

    return logits, greedy(step, src.shape[0], steps)


def logits_gap(step: Step, reference: list[Tensor], tokens: Tensor) -> float:
    """The largest difference between ``step``'s logits and the fast step's ``reference``
    (:func:`fast_reference`), feeding ``step`` the fast step's greedy ``tokens``."""
    ids, gap = torch.full((tokens.shape[0],), BOS, dtype=torch.long), 0.0
    for t, expected in enumerate(reference):
        gap = max(gap, float((step(ids, t) - expected).abs().max()))
        ids = tokens[:, t]
    return gap


#: Other shapes the checks cover (the timed model is post-LN, sinusoidal, multi-head).
SHAPES: dict[str, dict[str, Any]] = {
    "pre-LN, grouped-query, learned positions, GELU, output bias": {
        "norm_first": True,
        "num_kv_heads": 2,
        "positional": "learned",
        "activation": "gelu",
        "output_bias": True,
        "tie_output": False,
    },
    "post-LN, SiLU, no embedding scaling, 3 + 1 layers": {
        "activation": "silu",
        "scale_embeddings": False,
        "num_encoder_layers": 3,
        "num_decoder_layers": 1,
    },
}


def shape_checks(compile_too: bool) -> dict[str, Any]:
    """The static step (eager, and compiled with ``compile_too``) against the fast step on
    random models of :data:`SHAPES`, 3 sources of which two are padded."""
    results = {}
    for index, (name, options) in enumerate(SHAPES.items()):
        torch.manual_seed(100 + index)
        base = {
            "vocab_size": 50,
            "d_model": 32,
            "num_heads": 4,
            "d_ff": 48,
            "num_encoder_layers": 2,
            "num_decoder_layers": 2,
            "dropout": 0.0,
        }
        model = attnlab.Transformer(attnlab.TransformerConfig(**{**base, **options})).eval()
        src = torch.randint(4, 50, (3, 9))
        src[1, 6:] = PAD
        src[2, 3:] = PAD
        reference, fast = fast_reference(model, src, 10)
        module = StaticStep(model, 3, 10, 12)
        steps: dict[str, tuple[StaticStep, Callable[..., Tensor]]] = {"static": (module, module)}
        if compile_too:
            module = StaticStep(model, 3, 10, 12)
            steps["inductor"] = (module, compile_step(module, None))
        for kind, (module, run) in steps.items():
            gap = logits_gap(static_step(model, module, run, src), reference, fast)
            same = bool(torch.equal(greedy(static_step(model, module, run, src), 3, 10), fast))
            results[f"{name}: {kind}"] = {"max_logit_diff": gap, "same_tokens": same}
            print(
                f"{name}, {kind}: logits within {gap:.2e}, tokens "
                f"{'identical' if same else 'DIFFERENT'}",
                flush=True,
            )
    return results


def make_model(quick: bool) -> attnlab.Transformer:
    """The decode benchmark's model (its weights: ``benchmarks/decode.py``), or a tiny one."""
    if quick:
        torch.manual_seed(0)
        config = attnlab.TransformerConfig(
            vocab_size=64,
            d_model=32,
            num_heads=4,
            d_ff=64,
            num_encoder_layers=2,
            num_decoder_layers=2,
            dropout=0.0,
        )
        return attnlab.Transformer(config).eval()
    from decode import make_models  # benchmarks/ is on the path: this script's directory

    return make_models()[0]


def measure(
    model: attnlab.Transformer,
    plan: Plan,
    batch: int,
    variants: dict[str, dict[str, Any]],
    extra: dict[str, Any],
) -> list[Row]:
    """Check every contender against the fast step at ``batch`` sentences (into ``extra``),
    then time them interleaved: one row per contender, tokens/s over the fast step's."""
    new_tokens = plan.new_tokens
    gen = torch.Generator().manual_seed(batch)
    src = torch.randint(4, model.config.vocab_size, (batch, plan.source_length), generator=gen)
    modules = {"static": StaticStep(model, batch, new_tokens, plan.source_length)}
    runs: dict[str, Callable[..., Tensor]] = {"static": modules["static"]}
    for name, options in variants.items():
        modules[name] = StaticStep(model, batch, new_tokens, plan.source_length)
        runs[name] = compile_step(modules[name], options)

    def decode(name: str | None) -> Tensor:
        if name is None:
            return greedy(fast_step(model, src, new_tokens), batch, new_tokens)
        return greedy(static_step(model, modules[name], runs[name], src), batch, new_tokens)

    reference_logits, reference = fast_reference(model, src, new_tokens)
    for name, run in runs.items():
        began = time.perf_counter()
        same = bool(torch.equal(decode(name), reference))  # a compiled one compiles here
        if name != "static":
            extra["compile_s"][f"B{batch}_{name}"] = time.perf_counter() - began
        gap = logits_gap(static_step(model, modules[name], run, src), reference_logits, reference)
        extra["checks"][f"B{batch}_{name}"] = {"max_logit_diff": gap, "same_tokens": same}
        print(
            f"batch {batch} {name}: logits within {gap:.2e} of the fast step, "
            f"tokens {'identical' if same else 'DIFFERENT'}",
            flush=True,
        )
        if not same or gap > 1e-4:
            raise SystemExit(f"{name} at batch {batch} does not match the fast step")
    fns: dict[str, Callable[[], object]] = {"fast": partial(decode, None)}
    fns.update({name: partial(decode, name) for name in runs})
    samples = interleaved(fns, plan.reps, warmup=1)
    fast, count = samples.pop("fast"), batch * new_tokens
    return [
        Row(
            key=f"greedy_B{batch}_{name}",
            label=f"greedy batch {batch}: {name} (tokens/s over the fast step's)",
            unit="tok/s",
            attnlab=count / statistics.median(times),
            attnlab_best=count / min(times),
            baseline_name="fast step",
            baseline=count / statistics.median(fast),
            baseline_best=count / min(fast),
            ratio=statistics.median(fast) / statistics.median(times),
            ratio_best=min(fast) / min(times),
            target="info",
            passed=None,
            details={name: summary(times), "fast": summary(fast)},
        )
        for name, times in samples.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__ or "", DEFAULT_OUT, "tiny model, 8 tokens, inductor only")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per contender")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="compile into a fresh inductor cache (the first compile's time; by default "
        "inductor's on-disk cache holds what earlier runs compiled)",
    )
    args = parser.parse_args(argv)
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 64  # every variant and batch size has its entry
    model = make_model(args.quick)
    variants = {"inductor": VARIANTS["inductor"]} if args.quick else VARIANTS
    no_compile = why_not_compile(torch.device("cpu"))
    if no_compile:
        print(f"compile: {no_compile}; the static step is measured eagerly only", flush=True)
        variants = {}
    plan = Plan(
        new_tokens=8 if args.quick else 128,
        source_length=6 if args.quick else 32,
        batches=(1, 2) if args.quick else (1, 32),
        reps=1 if args.quick else args.reps,
        variants=tuple(variants),
    )
    extra: dict[str, Any] = {"checks": {}, "compile_s": {}, "variant_options": variants}
    extra["inductor_cache"] = "fresh (--cold)" if args.cold else "inductor's default, maybe warm"
    extra["why_not_compile"] = no_compile
    rows: list[Row] = []
    start = time.perf_counter()
    with torch.no_grad():  # not inference mode: the fast step versions its weights
        extra["compilations"] = compilations(model, plan.batches, 6 if args.quick else 16)
        extra["shape_checks"] = shape_checks(compile_too=not no_compile)
        torch._dynamo.reset()
        for batch in plan.batches:
            rows += measure(model, plan, batch, variants, extra)
    print_table(rows)
    print(f"compilations over {len(plan.batches)} batch sizes: {extra['compilations']}")
    return finish("static_decode", args, plan, rows, time.perf_counter() - start, extra)


if __name__ == "__main__":
    raise SystemExit(main())
