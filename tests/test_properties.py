"""Property tests (hypothesis) of the invariances attention, masks and positions must have.

Random tensors come from a ``torch.Generator`` seeded by hypothesis, so every failure replays.
Tolerances (float32 unless stated): 1e-5 absolute for outputs, exact where the property is exact
(zero weights, zero rows, mask algebra).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from attnlab import (
    ALiBi,
    MultiHeadAttention,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    causal_mask,
    combine_masks,
    key_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from attnlab.nn.masks import from_torch_masks, to_additive_mask
from attnlab.nn.positional import sinusoidal_table

ATOL = 1e-5
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
FAST = settings(max_examples=30, deadline=None)
FEW = settings(max_examples=15, deadline=None)


# -- helpers ---------------------------------------------------------------------------------


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype)


def randomize_(module: nn.Module, g: torch.Generator) -> nn.Module:
    """Random weights *and* biases (the default init zeroes biases, which would hide bias bugs)."""
    with torch.no_grad():
        for p in module.parameters():
            std = p.shape[-1] ** -0.5 if p.dim() == 2 else 0.3
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)
    return module


def make_mha(g: torch.Generator, d_model: int, heads: int, **kwargs) -> MultiHeadAttention:
    return randomize_(MultiHeadAttention(d_model, heads, **kwargs), g).eval()


def make_positional(kind: str, heads: int, head_dim: int):
    return {"none": None, "rope": RotaryEmbedding(head_dim), "alibi": ALiBi(heads)}[kind]


def max_diff(a: Tensor, b: Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max())


@st.composite
def mha_shapes(draw, min_t: int = 1, max_t: int = 6):
    """(batch, T, heads, kv_heads, head_dim); head_dim even so RoPE fits."""
    heads = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    head_dim = draw(st.sampled_from([2, 4, 6]))
    batch = draw(st.integers(1, 3))
    t = draw(st.integers(min_t, max_t))
    return batch, t, heads, kv_heads, head_dim


@st.composite
def sdpa_shapes(draw, max_t: int = 6):
    """(batch, heads, kv_heads, t_q, t_k, head_dim, v_dim)."""
    heads = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    return (
        draw(st.integers(1, 3)),
        heads,
        kv_heads,
        draw(st.integers(1, max_t)),
        draw(st.integers(1, max_t)),
        draw(st.sampled_from([1, 3, 4, 8])),
        draw(st.sampled_from([1, 2, 5])),
    )


def random_bool_mask(g: torch.Generator, *shape: int, keep_one: bool = True) -> Tensor:
    """Random bool mask; with ``keep_one`` every row (last dim) has at least one True."""
    mask = torch.rand(*shape, generator=g) < 0.6
    if keep_one:
        col = torch.randint(0, shape[-1], shape[:-1], generator=g)
        mask.scatter_(-1, col[..., None], True)
    return mask


def numpy_attention(q, k, v, mask=None, scale=None, bias=None):
    """Eq. 1 in float64 NumPy, written from the paper; GQA by repeating k/v heads."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is not None:
        scores = scores + np.asarray(bias, dtype=np.float64)
    if mask is not None:
        scores = np.where(np.asarray(mask), scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, v), weights


# -- T7: permutation equivariance without positions --------------------------------------------


@FAST
@given(seed=SEEDS, shape=mha_shapes(), data=st.data())
def test_mha_self_attention_is_permutation_equivariant(seed, shape, data):
    batch, t, heads, kv_heads, head_dim = shape
    perm = data.draw(st.permutations(range(t)), label="perm")
    g = gen(seed)
    mha = make_mha(g, heads * head_dim, heads, num_kv_heads=kv_heads)
    x = randn(g, batch, t, heads * head_dim)
    with torch.no_grad():
        out, w = mha(x, need_weights=True)
        out_p, w_p = mha(x[:, perm], need_weights=True)
        fast_p, _ = mha(x[:, perm])
    assert max_diff(out_p, out[:, perm]) <= ATOL
    assert max_diff(fast_p, out[:, perm]) <= ATOL
    assert max_diff(w_p, w[:, :, perm][:, :, :, perm]) <= ATOL


@FAST
@given(seed=SEEDS, shape=sdpa_shapes(), weights=st.booleans(), data=st.data())
def test_sdpa_key_permutation_invariance_and_query_equivariance(seed, shape, weights, data):
    batch, heads, kv_heads, t_q, t_k, d, dv = shape
    kperm = data.draw(st.permutations(range(t_k)), label="key perm")
    qperm = data.draw(st.permutations(range(t_q)), label="query perm")
    g = gen(seed)
    q, k = randn(g, batch, heads, t_q, d), randn(g, batch, kv_heads, t_k, d)
    v = randn(g, batch, kv_heads, t_k, dv)
    mask = random_bool_mask(g, batch, 1, t_q, t_k)

    def run(q_, k_, v_, m_):
        res = scaled_dot_product_attention(q_, k_, v_, m_, return_weights=weights)
        return res[0] if weights else res

    out = run(q, k, v, mask)
    # keys and values permuted together (and the mask's key axis with them): same output
    assert max_diff(run(q, k[:, :, kperm], v[:, :, kperm], mask[..., kperm]), out) <= ATOL
    # queries permuted (and the mask's query axis): output rows permuted the same way
    assert max_diff(run(q[:, :, qperm], k, v, mask[:, :, qperm]), out[:, :, qperm]) <= ATOL


@FAST
@given(seed=SEEDS, shape=mha_shapes(min_t=2), data=st.data())
def test_sinusoidal_encoding_breaks_permutation_equivariance(seed, shape, data):
    batch, t, heads, kv_heads, head_dim = shape
    perm = data.draw(st.permutations(range(t)), label="perm")
    assume(perm != list(range(t)))
    g = gen(seed)
    d_model = heads * head_dim
    mha = make_mha(g, d_model, heads, num_kv_heads=kv_heads)
    pe = SinusoidalPositionalEncoding(d_model)
    x = randn(g, batch, t, d_model)
    with torch.no_grad():
        out = mha(pe(x))[0]
        out_p = mha(pe(x[:, perm]))[0]
    # the order now matters: permuting the tokens is not the same as permuting the output
    assert max_diff(out_p, out[:, perm]) > 1e-3


# -- T10: masked keys ------------------------------------------------------------------------


@FAST
@given(seed=SEEDS, shape=sdpa_shapes(), kind=st.sampled_from(["bool", "float"]))
def test_masked_keys_get_zero_weight_and_do_not_matter(seed, shape, kind):
    batch, heads, kv_heads, t_q, t_k, d, dv = shape
    g = gen(seed)
    q, k = randn(g, batch, heads, t_q, d), randn(g, batch, kv_heads, t_k, d)
    v = randn(g, batch, kv_heads, t_k, dv)
    lengths = torch.randint(1, t_k + 1, (batch,), generator=g)
    allowed = key_mask(padding_mask(lengths, t_k))  # (B, 1, 1, T_k)
    mask = allowed if kind == "bool" else to_additive_mask(allowed)
    # a float mask may also carry finite biases on the allowed keys
    if kind == "float":
        mask = mask + 0.5 * randn(g, batch, 1, 1, t_k)

    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    blocked = (~allowed).expand_as(w)
    assert torch.all(w[blocked] == 0.0)
    assert max_diff(w.sum(-1), torch.ones_like(w.sum(-1))) <= 1e-6

    # change what sits behind the mask, by a lot: neither path notices
    noise_k, noise_v = 100 * randn(g, *k.shape), 100 * randn(g, *v.shape)
    hidden = ~allowed[:, :, 0, :, None]  # (B, 1, T_k, 1)
    k2, v2 = torch.where(hidden, noise_k, k), torch.where(hidden, noise_v, v)
    out2, w2 = scaled_dot_product_attention(q, k2, v2, mask, return_weights=True)
    assert max_diff(out2, out) <= 1e-6
    assert max_diff(w2, w) <= 1e-6
    fast = scaled_dot_product_attention(q, k, v, mask)
    fast2 = scaled_dot_product_attention(q, k2, v2, mask)
    assert max_diff(fast2, fast) <= 1e-6
    assert max_diff(fast, out) <= ATOL


@FAST
@given(seed=SEEDS, shape=mha_shapes(), t_k=st.integers(1, 6), kind=st.sampled_from(["b", "f"]))
def test_mha_masked_context_positions_do_not_matter(seed, shape, t_k, kind):
    batch, t_q, heads, kv_heads, head_dim = shape
    g = gen(seed)
    d_model = heads * head_dim
    mha = make_mha(g, d_model, heads, num_kv_heads=kv_heads)
    x, ctx = randn(g, batch, t_q, d_model), randn(g, batch, t_k, d_model)
    real = padding_mask(torch.randint(1, t_k + 1, (batch,), generator=g), t_k)
    mask = key_mask(real) if kind == "b" else to_additive_mask(key_mask(real))
    ctx2 = torch.where(real[..., None], ctx, 50 * randn(g, *ctx.shape))
    with torch.no_grad():
        out, w = mha(x, ctx, mask=mask, need_weights=True)
        out2, w2 = mha(x, ctx2, mask=mask, need_weights=True)
        fast2, _ = mha(x, ctx2, mask=mask)
    assert torch.all(w[(~real)[:, None, None, :].expand_as(w)] == 0.0)
    assert max_diff(out2, out) <= 1e-5
    assert max_diff(fast2, out) <= ATOL
    assert max_diff(w2, w) <= 1e-6

    # self-attention with padding: the real positions do not see the padded ones
    xs = randn(g, batch, t_k, d_model)
    xs2 = torch.where(real[..., None], xs, 50 * randn(g, *xs.shape))
    with torch.no_grad():
        o1, _ = mha(xs, mask=mask)
        o2, _ = mha(xs2, mask=mask)
    assert max_diff(o1[real], o2[real]) <= 1e-5


# -- T11: causality --------------------------------------------------------------------------


@FAST
@given(
    seed=SEEDS,
    shape=mha_shapes(max_t=7),
    pos=st.sampled_from(["none", "rope", "alibi"]),
    how=st.sampled_from(["is_causal", "mask", "is_causal+weights", "mask+weights"]),
    data=st.data(),
)
def test_causal_output_ignores_the_future(seed, shape, pos, how, data):
    batch, t, heads, kv_heads, head_dim = shape
    cut = data.draw(st.integers(0, t - 1), label="t")
    g = gen(seed)
    d_model = heads * head_dim
    mha = make_mha(
        g, d_model, heads, num_kv_heads=kv_heads, positional=make_positional(pos, heads, head_dim)
    )
    x = randn(g, batch, t, d_model)
    x2 = x.clone()
    x2[:, cut + 1 :] += 10 * randn(g, batch, t - cut - 1, d_model)
    kwargs = {"is_causal": True} if how.startswith("is_causal") else {"mask": causal_mask(t)}
    kwargs["need_weights"] = how.endswith("weights")
    with torch.no_grad():
        out, w = mha(x, **kwargs)
        out2, _ = mha(x2, **kwargs)
        ref, _ = mha(x, mask=causal_mask(t), need_weights=True)
    assert max_diff(out2[:, : cut + 1], out[:, : cut + 1]) <= 1e-5
    assert max_diff(out, ref) <= ATOL  # is_causal == causal_mask(T), fast == weights path
    if w is not None:
        upper = ~causal_mask(t)
        assert torch.all(w[:, :, upper] == 0.0)
    if cut + 1 < t and max_diff(x2, x) > 0:  # the future does change the future
        assert max_diff(out2[:, cut + 1 :], out[:, cut + 1 :]) > 1e-4


# -- fully masked rows -------------------------------------------------------------------------


@FAST
@given(
    seed=SEEDS,
    shape=sdpa_shapes(),
    kind=st.sampled_from(["bool", "float", "causal_tall", "causal_mask_tall"]),
    weights=st.booleans(),
    data=st.data(),
)
def test_fully_masked_rows_are_zero_with_finite_grads(seed, shape, kind, weights, data):
    batch, heads, kv_heads, t_q, t_k, d, dv = shape
    g = gen(seed)
    if kind.startswith("causal"):
        t_q = t_k + data.draw(st.integers(1, 3), label="extra queries")
        empty = torch.arange(t_q) < t_q - t_k  # bottom-right alignment: the first rows see nothing
        kw = {"is_causal": True} if kind == "causal_tall" else {"mask": causal_mask(t_q, t_k)}
        ref_kw = {"is_causal": True}  # the remaining rows form a square causal problem
    else:
        t_q = max(t_q, 2)
        empty = torch.rand(t_q, generator=g) < 0.5
        empty[0] = True
        empty[-1] = False
        allowed = random_bool_mask(g, batch, heads, t_q, t_k)
        allowed[:, :, empty] = False
        mask = allowed if kind == "bool" else to_additive_mask(allowed)
        kw = {"mask": mask}
        ref_kw = {"mask": mask[:, :, ~empty]}
    q = randn(g, batch, heads, t_q, d).requires_grad_()
    k = randn(g, batch, kv_heads, t_k, d).requires_grad_()
    v = randn(g, batch, kv_heads, t_k, dv).requires_grad_()
    upstream = randn(g, batch, heads, t_q, dv)

    res = scaled_dot_product_attention(q, k, v, return_weights=weights, **kw)
    out, w = res if weights else (res, None)
    assert torch.all(out[:, :, empty] == 0.0)
    assert torch.isfinite(out).all()
    loss = (out * upstream).sum()
    if w is not None:
        assert torch.all(w[:, :, empty] == 0.0)
        row_sums = w[:, :, ~empty].sum(-1)
        assert max_diff(row_sums, torch.ones_like(row_sums)) <= 1e-6
        loss = loss + (w**2).sum()
    dq, dk, dv_ = torch.autograd.grad(loss, (q, k, v))
    for grad in (dq, dk, dv_):
        assert torch.isfinite(grad).all()
    assert torch.all(dq[:, :, empty].abs() <= 1e-7)  # an empty row has no influence

    # the same problem without the empty rows gives the same gradients for k, v and the rows left
    q_ref = q.detach()[:, :, ~empty].clone().requires_grad_()
    k_ref, v_ref = k.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
    res = scaled_dot_product_attention(q_ref, k_ref, v_ref, return_weights=weights, **ref_kw)
    out_ref, w_ref = res if weights else (res, None)
    loss_ref = (out_ref * upstream[:, :, ~empty]).sum()
    if w_ref is not None:
        loss_ref = loss_ref + (w_ref**2).sum()
    gq, gk, gv = torch.autograd.grad(loss_ref, (q_ref, k_ref, v_ref))
    assert max_diff(out[:, :, ~empty], out_ref) <= ATOL
    assert max_diff(dq[:, :, ~empty], gq) <= 1e-4
    assert max_diff(dk, gk) <= 1e-4
    assert max_diff(dv_, gv) <= 1e-4


@FEW
@given(seed=SEEDS, shape=mha_shapes(max_t=4), extra=st.integers(1, 3), weights=st.booleans())
def test_mha_causal_cross_attention_with_more_queries_than_keys(seed, shape, extra, weights):
    batch, t_k, heads, kv_heads, head_dim = shape
    t_q = t_k + extra
    g = gen(seed)
    d_model = heads * head_dim
    mha = make_mha(g, d_model, heads, num_kv_heads=kv_heads)
    x, ctx = randn(g, batch, t_q, d_model), randn(g, batch, t_k, d_model)
    out, w = mha(x, ctx, is_causal=True, need_weights=weights)
    # the first `extra` queries see no key: their attention is zero, so only W^O's bias is left
    expected = mha.out_proj.bias.detach().expand(batch, extra, d_model)
    assert max_diff(out[:, :extra], expected) <= 1e-6
    if weights:
        assert torch.all(w[:, :, :extra] == 0.0)
        (out.sum() + w.sum()).backward()
    else:
        out.sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@FEW
@given(
    seed=SEEDS,
    shape=mha_shapes(min_t=2),
    pos=st.sampled_from(["none", "rope", "alibi"]),
    weights=st.booleans(),
    causal=st.booleans(),
)
def test_mha_all_padding_sequence_gives_bias_only_and_finite_grads(
    seed, shape, pos, weights, causal
):
    batch, t, heads, kv_heads, head_dim = shape
    g = gen(seed)
    d_model = heads * head_dim
    mha = make_mha(
        g, d_model, heads, num_kv_heads=kv_heads, positional=make_positional(pos, heads, head_dim)
    )
    lengths = torch.randint(1, t + 1, (batch + 1,), generator=g)
    lengths[0] = 0  # the first sequence is all padding: every one of its rows is empty
    x = randn(g, batch + 1, t, d_model).requires_grad_()
    out, w = mha(x, mask=key_mask(padding_mask(lengths, t)), is_causal=causal, need_weights=weights)
    expected = mha.out_proj.bias.detach().expand(t, d_model)
    assert max_diff(out[0], expected) <= 1e-6
    loss = (out * randn(g, *out.shape)).sum()
    if weights:
        assert torch.all(w[0] == 0.0)
        loss = loss + (w**2).sum()
    loss.backward()
    assert torch.isfinite(x.grad).all()
    assert torch.all(x.grad[0] == 0.0)  # nothing in the empty sequence influences anything
    for name, p in mha.named_parameters():
        assert torch.isfinite(p.grad).all(), name


# -- grouped-query attention -------------------------------------------------------------------


@FEW
@given(seed=SEEDS, shape=mha_shapes(), cross=st.booleans())
def test_num_kv_heads_equal_to_num_heads_is_plain_mha(seed, shape, cross):
    batch, t, heads, _, head_dim = shape
    d_model = heads * head_dim
    torch.manual_seed(seed % 2**31)
    plain = MultiHeadAttention(d_model, heads)
    torch.manual_seed(seed % 2**31)
    explicit = MultiHeadAttention(d_model, heads, num_kv_heads=heads)
    layout = [(n, tuple(p.shape)) for n, p in plain.named_parameters()]
    assert layout == [(n, tuple(p.shape)) for n, p in explicit.named_parameters()]
    assert ("in_proj.weight", (3 * d_model, d_model)) in layout
    for (_, a), (_, b) in zip(
        plain.state_dict().items(), explicit.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b)  # same initialisation draws, too
    g = gen(seed)
    randomize_(plain, g)
    explicit.load_state_dict(plain.state_dict())
    x = randn(g, batch, t, d_model)
    ctx = randn(g, batch, t + 1, d_model) if cross else None
    with torch.no_grad():
        for need in (False, True):
            a, wa = plain(x, ctx, need_weights=need)
            b, wb = explicit(x, ctx, need_weights=need)
            assert torch.equal(a, b)
            if need:
                assert torch.equal(wa, wb)


@FAST
@given(
    seed=SEEDS,
    shape=mha_shapes(),
    pos=st.sampled_from(["none", "rope", "alibi"]),
    cross=st.booleans(),
    causal=st.booleans(),
)
def test_gqa_equals_mha_with_repeated_kv_rows(seed, shape, pos, cross, causal):
    batch, t, heads, kv_heads, head_dim = shape
    g = gen(seed)
    d_model = heads * head_dim
    gqa = make_mha(
        g, d_model, heads, num_kv_heads=kv_heads, positional=make_positional(pos, heads, head_dim)
    )
    full = MultiHeadAttention(
        d_model, heads, positional=make_positional(pos, heads, head_dim)
    ).eval()
    kv = kv_heads * head_dim
    assert gqa.in_proj.weight.shape == (d_model + 2 * kv, d_model)
    # query head h uses kv head h // (heads / kv_heads): repeat each kv head's rows for its group
    group_of = torch.arange(heads) // (heads // kv_heads)
    rows = (group_of[:, None] * head_dim + torch.arange(head_dim)).reshape(-1)  # (d_model,)
    with torch.no_grad():
        w, b = gqa.in_proj.weight, gqa.in_proj.bias
        wq, wk, wv = w[:d_model], w[d_model : d_model + kv], w[d_model + kv :]
        bq, bk, bv = b[:d_model], b[d_model : d_model + kv], b[d_model + kv :]
        full.in_proj.weight.copy_(torch.cat([wq, wk[rows], wv[rows]]))
        full.in_proj.bias.copy_(torch.cat([bq, bk[rows], bv[rows]]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = randn(g, batch, t, d_model)
    ctx = randn(g, batch, t + 2, d_model) if cross else None
    with torch.no_grad():
        for need in (False, True):
            a, wa = gqa(x, ctx, is_causal=causal, need_weights=need)
            f, wf = full(x, ctx, is_causal=causal, need_weights=need)
            assert max_diff(a, f) <= ATOL
            if need:
                assert max_diff(wa, wf) <= 1e-6


# -- sinusoidal encoding -----------------------------------------------------------------------


@FAST
@given(
    d_model=st.integers(1, 65),
    positions=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
)
def test_sinusoidal_matches_closed_form(d_model, positions):
    length = max(positions) + 1
    pe = SinusoidalPositionalEncoding(d_model)
    t32 = pe.table(length)
    t64 = pe.table(length, dtype=torch.float64)
    assert t32.dtype == torch.float32 and t64.dtype == torch.float64
    assert t32.shape == t64.shape == (length, d_model)
    assert torch.equal(sinusoidal_table(length, d_model), t64)
    for pos in positions:
        for col in range(d_model):
            i = col // 2
            angle = pos / 10000 ** (2 * i / d_model)
            want = math.sin(angle) if col % 2 == 0 else math.cos(angle)
            assert abs(float(t64[pos, col]) - want) <= 1e-12, (pos, col)
            assert abs(float(t32[pos, col]) - want) <= 1e-6 * max(1.0, abs(want)), (pos, col)
    # forward adds exactly the table
    x = torch.randn(2, min(length, 7), d_model)
    assert torch.equal(pe(x), x + t32[: x.shape[1]])


@FAST
@given(d_model=st.integers(1, 33), n=st.integers(1, 40), offset=st.integers(0, 3000))
def test_sinusoidal_offset_consistency(d_model, n, offset):
    pe = SinusoidalPositionalEncoding(d_model)
    whole = pe.table(offset + n)
    assert torch.equal(pe.table(n, offset=offset), whole[offset:])
    fresh = SinusoidalPositionalEncoding(d_model).table(n, offset=offset)  # cache grown differently
    assert max_diff(fresh, whole[offset:]) <= 1e-7
    w64 = pe.table(offset + n, dtype=torch.float64)
    assert max_diff(pe.table(n, offset=offset, dtype=torch.float64), w64[offset:]) <= 1e-15
    x = torch.randn(1, n, d_model)
    assert torch.equal(pe(x, offset=offset), x + whole[offset:])


# -- RoPE --------------------------------------------------------------------------------------


@FAST
@given(
    seed=SEEDS,
    half=st.integers(1, 8),
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(0, 500),
)
def test_rope_scores_depend_on_relative_position_only(seed, half, m, n, shift):
    head_dim = 2 * half
    rope = RotaryEmbedding(head_dim)
    g = gen(seed)
    q, k = randn(g, 1, head_dim), randn(g, 1, head_dim)

    def score(pm: int, pn: int) -> float:
        return float((rope.rotate(q, offset=pm) * rope.rotate(k, offset=pn)).sum())

    assert abs(score(m, n) - score(m + shift, n + shift)) <= 1e-5
    # closed form of the rotate-half rotation, from math
    rq = rope.rotate(q, offset=m)[0].tolist()
    for i in range(half):
        theta = m * 10000 ** (-2 * i / head_dim)
        c, s = math.cos(theta), math.sin(theta)
        a, b = float(q[0, i]), float(q[0, i + half])
        assert abs(rq[i] - (a * c - b * s)) <= 1e-5
        assert abs(rq[i + half] - (b * c + a * s)) <= 1e-5


@FAST
@given(seed=SEEDS, half=st.integers(1, 8), t=st.integers(1, 6), offset=st.integers(0, 10000))
def test_rope_preserves_norms(seed, half, t, offset):
    rope = RotaryEmbedding(2 * half)
    x = randn(gen(seed), 2, 3, t, 2 * half, dtype=torch.float64)
    r = rope.rotate(x, offset=offset)
    assert r.shape == x.shape
    assert max_diff(r.norm(dim=-1), x.norm(dim=-1)) <= 1e-12
    assert torch.equal(rope.rotate(x[..., :1, :], offset=0), x[..., :1, :])  # position 0: identity


@FAST
@given(
    seed=SEEDS,
    shape=mha_shapes(),
    pos=st.sampled_from(["rope", "alibi"]),
    shift=st.integers(1, 1000),
    causal=st.booleans(),
)
def test_relative_positional_mha_is_shift_invariant(seed, shape, pos, shift, causal):
    batch, t, heads, kv_heads, head_dim = shape
    g = gen(seed)
    d_model = heads * head_dim
    positional = make_positional(pos, heads, head_dim)
    mha = make_mha(g, d_model, heads, num_kv_heads=kv_heads, positional=positional)
    x = randn(g, batch, t, d_model)
    with torch.no_grad():
        for need in (False, True):
            a, wa = mha(x, is_causal=causal, need_weights=need, offset=0)
            b, wb = mha(x, is_causal=causal, need_weights=need, offset=shift)
            assert max_diff(a, b) <= 2e-5
            if need:
                assert max_diff(wa, wb) <= 2e-5


@FEW
@given(seed=SEEDS, shape=mha_shapes(), pos=st.sampled_from(["rope", "alibi"]))
def test_mha_positional_matches_manual_computation(seed, shape, pos):
    batch, t, heads, kv_heads, head_dim = shape
    g = gen(seed)
    d_model = heads * head_dim
    positional = make_positional(pos, heads, head_dim)
    mha = make_mha(g, d_model, heads, num_kv_heads=kv_heads, positional=positional)
    x = randn(g, batch, t, d_model)
    offset = 7
    with torch.no_grad():
        out, _ = mha(x, offset=offset)
        kv = kv_heads * head_dim
        q, k, v = mha.in_proj(x).split((d_model, kv, kv), dim=-1)
        q = q.reshape(batch, t, heads, head_dim).transpose(1, 2)
        k = k.reshape(batch, t, kv_heads, head_dim).transpose(1, 2)
        v = v.reshape(batch, t, kv_heads, head_dim).transpose(1, 2)
        bias = None
        if pos == "rope":
            q, k = positional.rotate(q, offset=offset), positional.rotate(k, offset=offset)
        else:  # -m_h |i - j|, slopes 2^(-8 h / H) for H a power of two
            i = np.arange(t, dtype=np.float64)
            slopes = np.array([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
            bias = -slopes[:, None, None] * np.abs(i[:, None] - i[None, :])
        o, _ = numpy_attention(q, k, v, bias=bias)
        o = torch.from_numpy(o).float().transpose(1, 2).reshape(batch, t, d_model)
        expected = mha.out_proj(o)
    assert max_diff(out, expected) <= ATOL


# -- ALiBi -------------------------------------------------------------------------------------


def _press_slopes(n: int) -> list[float]:
    """The slope recipe of Press et al.'s reference code."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _press_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_slopes_for_8_heads():
    assert ALiBi.slopes(8) == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    assert torch.equal(ALiBi(8).slope, torch.tensor([2.0**-k for k in range(1, 9)]).double())


@FAST
@given(heads=st.integers(1, 40))
def test_alibi_slopes_match_reference_recipe(heads):
    got, want = ALiBi.slopes(heads), _press_slopes(heads)
    assert len(got) == heads
    for a, b in zip(got, want, strict=True):
        assert abs(a - b) <= 1e-12 * b


@FAST
@given(
    heads=st.integers(1, 12),
    t_q=st.integers(1, 6),
    t_k=st.integers(1, 6),
    q_offset=st.integers(0, 50),
    k_offset=st.integers(0, 50),
)
def test_alibi_bias_is_minus_slope_times_distance(heads, t_q, t_k, q_offset, k_offset):
    alibi = ALiBi(heads)
    bias = alibi.bias(t_q, t_k, q_offset=q_offset, k_offset=k_offset, dtype=torch.float64)
    assert bias.shape == (1, heads, t_q, t_k)
    slopes = ALiBi.slopes(heads)
    for h in range(heads):
        for i in range(t_q):
            for j in range(t_k):
                want = -slopes[h] * abs((q_offset + i) - (k_offset + j))
                assert abs(float(bias[0, h, i, j]) - want) <= 1e-12
    # default query offset: the last t_q of the keys' positions (cached decoding)
    default = alibi.bias(t_q, t_k, k_offset=k_offset, dtype=torch.float64)
    explicit = alibi.bias(
        t_q, t_k, q_offset=max(k_offset + t_k - t_q, 0), k_offset=k_offset, dtype=torch.float64
    )
    assert torch.equal(default, explicit)


# -- masks -------------------------------------------------------------------------------------


@FAST
@given(t_q=st.integers(1, 12), t_k=st.integers(1, 12))
def test_causal_mask_bottom_right_definition(t_q, t_k):
    m = causal_mask(t_q, t_k)
    assert m.dtype == torch.bool and m.shape == (t_q, t_k)
    want = [[j <= i + (t_k - t_q) for j in range(t_k)] for i in range(t_q)]
    assert m.tolist() == want
    if t_q == t_k:
        assert torch.equal(causal_mask(t_q), m)


@FAST
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6), extra=st.integers(0, 3))
def test_padding_mask_definition(lengths, extra):
    max_len = max(lengths) + extra
    m = padding_mask(lengths, max_len)
    assert m.dtype == torch.bool and m.shape == (len(lengths), max_len)
    assert m.tolist() == [[p < n for p in range(max_len)] for n in lengths]
    assert torch.equal(padding_mask(torch.tensor(lengths)), m[:, : max(lengths)])
    km = key_mask(m)
    assert km.shape == (len(lengths), 1, 1, max_len) and torch.equal(km[:, 0, 0], m)


@FAST
@given(seed=SEEDS, t_q=st.integers(1, 5), t_k=st.integers(1, 5), b=st.integers(1, 3))
def test_combine_masks_bool_and_and_float_addition(seed, t_q, t_k, b):
    g = gen(seed)
    m1 = random_bool_mask(g, b, 1, 1, t_k, keep_one=False)
    m2 = random_bool_mask(g, t_q, t_k, keep_one=False)
    both = combine_masks(m1, None, m2)
    assert both.dtype == torch.bool and both.shape == (b, 1, t_q, t_k)
    assert torch.equal(both, m1 & m2)
    assert combine_masks(None, None) is None
    assert combine_masks(m2) is m2

    f = 0.5 * randn(g, b, 1, t_q, t_k)
    f[..., 0] = float("-inf")
    mixed = combine_masks(m1, f, m2)
    ninf = torch.tensor(float("-inf"))
    want = torch.where(m1, 0.0, ninf) + f + torch.where(m2, 0.0, ninf)
    assert mixed.dtype == torch.float32 and mixed.shape == want.shape
    assert torch.equal(mixed, want)  # -inf where any mask blocks, f elsewhere


@FAST
@given(seed=SEEDS, b=st.integers(1, 3), h=st.integers(1, 3), t_q=st.integers(1, 5))
def test_from_torch_masks_inverts_polarity(seed, b, h, t_q):
    g = gen(seed)
    t_k = t_q + 1
    kpm = torch.rand(b, t_k, generator=g) < 0.3  # torch: True = padding
    am2 = torch.rand(t_q, t_k, generator=g) < 0.3  # torch: True = blocked
    am3 = torch.rand(b * h, t_q, t_k, generator=g) < 0.3
    got = from_torch_masks(kpm, am2, batch_size=b, num_heads=h)
    assert got.dtype == torch.bool
    assert torch.equal(got, (~kpm)[:, None, None, :] & ~am2)
    got3 = from_torch_masks(None, am3, batch_size=b, num_heads=h)
    assert torch.equal(got3, ~am3.view(b, h, t_q, t_k))
    # floating masks are additive in both conventions: carried over as they are
    fam = randn(g, t_q, t_k)
    gotf = from_torch_masks(kpm, fam, batch_size=b, num_heads=h)
    want = torch.where(kpm, float("-inf"), 0.0)[:, None, None, :] + fam
    assert torch.equal(gotf, want)


@FEW
@given(
    seed=SEEDS, b=st.integers(1, 3), t=st.integers(1, 5), t_k=st.integers(1, 5), cross=st.booleans()
)
def test_from_torch_masks_gives_torch_mha_results(seed, b, t, t_k, cross):
    g = gen(seed)
    heads, d_model = 2, 8
    t_k = t_k if cross else t
    ref = nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
    randomize_(ref, g)
    mine = MultiHeadAttention.from_torch(ref).eval()
    x = randn(g, b, t, d_model)
    ctx = randn(g, b, t_k, d_model) if cross else x
    kpm = torch.rand(b, t_k, generator=g) < 0.4
    kpm[:, 0] = False  # torch gives NaN for fully masked rows
    am = torch.rand(t, t_k, generator=g) < 0.4
    am[:, 0] = False
    with torch.no_grad():
        want, want_w = ref(
            x, ctx, ctx, key_padding_mask=kpm, attn_mask=am, average_attn_weights=False
        )
        mask = from_torch_masks(kpm, am, batch_size=b, num_heads=heads)
        got, got_w = mine(x, ctx if cross else None, mask=mask, need_weights=True)
    assert max_diff(got, want) <= ATOL
    assert max_diff(got_w, want_w) <= 1e-6


# -- NumPy reference of eq. 1 ------------------------------------------------------------------


@FAST
@given(
    seed=SEEDS,
    shape=sdpa_shapes(),
    use_mask=st.booleans(),
    scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
)
def test_sdpa_matches_numpy_float64_reference(seed, shape, use_mask, scale):
    batch, heads, kv_heads, t_q, t_k, d, dv = shape
    g = gen(seed)
    q, k = randn(g, batch, heads, t_q, d), randn(g, batch, kv_heads, t_k, d)
    v = randn(g, batch, kv_heads, t_k, dv)
    mask = random_bool_mask(g, batch, heads, t_q, t_k) if use_mask else None
    want_out, want_w = numpy_attention(q, k, v, mask, scale)
    fast = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    out, w = scaled_dot_product_attention(q, k, v, mask, scale=scale, return_weights=True)
    assert fast.shape == out.shape == (batch, heads, t_q, dv)
    assert w.shape == (batch, heads, t_q, t_k)
    assert np.abs(fast.double().numpy() - want_out).max() <= ATOL
    assert np.abs(out.double().numpy() - want_out).max() <= ATOL
    assert np.abs(w.double().numpy() - want_w).max() <= ATOL


@FAST
@given(
    seed=SEEDS,
    shape=sdpa_shapes(),
    kind=st.sampled_from(["none", "bool", "float", "causal"]),
)
def test_weights_path_equals_fast_path(seed, shape, kind):
    batch, heads, kv_heads, t_q, t_k, d, dv = shape
    g = gen(seed)
    q, k = randn(g, batch, heads, t_q, d), randn(g, batch, kv_heads, t_k, d)
    v = randn(g, batch, kv_heads, t_k, dv)
    kw: dict = {"dropout_p": 0.0}
    if kind == "bool":
        kw["mask"] = random_bool_mask(g, batch, 1, t_q, t_k)
    elif kind == "float":
        kw["mask"] = randn(g, heads, t_q, t_k)
    elif kind == "causal":
        kw["is_causal"] = True
    fast = scaled_dot_product_attention(q, k, v, **kw)
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    # atol 1e-6 plus rtol 1e-6: float32 rounding of outputs of magnitude up to ~3
    assert torch.allclose(fast, out, atol=1e-6, rtol=1e-6), max_diff(fast, out)
    # the returned weights are the ones applied to v (GQA: each kv head serves its group)
    v_full = v.repeat_interleave(heads // kv_heads, dim=1)
    assert torch.allclose(w @ v_full, out, atol=1e-6, rtol=1e-6), max_diff(w @ v_full, out)
