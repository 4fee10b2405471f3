"""Parity with references someone else wrote: torch.nn.MultiheadAttention and torch's SDPA.

Every comparison uses atol 1e-5 (float32) unless stated.
"""

from __future__ import annotations

import random
import warnings

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.nn.masks import causal_mask, from_torch_masks, key_mask, padding_mask

ATOL = 1e-5


def _random_case(seed: int) -> dict:
    """One random configuration of torch.nn.MultiheadAttention and its inputs."""
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 3, 4, 8])
    d_model = heads * rng.choice([1, 2, 4, 8, 16])
    cross = rng.random() < 0.5
    separate = cross and rng.random() < 0.4
    return {
        "heads": heads,
        "d_model": d_model,
        "cross": cross,
        "kdim": rng.choice([3, 7, 12]) if separate else None,
        "vdim": rng.choice([5, 9, 12]) if separate else None,
        "bias": rng.random() < 0.75,
        "batch_first": rng.random() < 0.5,
        "batch": rng.randint(1, 4),
        "t_q": rng.randint(1, 9),
        "t_k": rng.randint(1, 9),
        "key_padding": rng.choice(["none", "bool", "float"]),
        "attn_mask": rng.choice(["none", "bool2d", "float2d", "bool3d", "float3d"]),
        "need_weights": rng.random() < 0.5,
        "average": rng.random() < 0.5,
        "train": rng.random() < 0.4,
        "distinct_value": cross and rng.random() < 0.5,
        "float64": rng.random() < 0.2,
        "seed": seed,
    }


def _torch_masks(case: dict, t_k: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """torch-polarity masks (True = ignore) that always leave key 0 visible to every query,
    so that no row is fully masked (torch returns NaN there; attnlab returns zeros)."""
    b, h, t_q = case["batch"], case["heads"], case["t_q"]
    key_padding = None
    if case["key_padding"] != "none":
        lengths = torch.randint(1, t_k + 1, (b,))
        pad = ~padding_mask(lengths, t_k)  # True = padding
        if case["key_padding"] == "bool":
            key_padding = pad
        else:
            key_padding = torch.zeros(b, t_k).masked_fill(pad, float("-inf"))
            key_padding += 0.1 * torch.randn(b, t_k)
    attn = None
    kind = case["attn_mask"]
    if kind != "none":
        shape = (t_q, t_k) if kind.endswith("2d") else (b * h, t_q, t_k)
        blocked = torch.rand(shape) < 0.4
        blocked[..., 0] = False
        if kind.startswith("bool"):
            attn = blocked
        else:
            attn = torch.randn(shape).masked_fill(blocked, float("-inf"))
    return key_padding, attn


CASES = [_random_case(seed) for seed in range(120)]


def _case_id(case: dict) -> str:
    kind = "cross" if case["cross"] else "self"
    return (
        f"s{case['seed']}-{kind}-h{case['heads']}-d{case['d_model']}-kp_{case['key_padding']}"
        f"-am_{case['attn_mask']}-{'w' if case['need_weights'] else 'nw'}"
        f"-{'train' if case['train'] else 'eval'}{'-f64' if case['float64'] else ''}"
    )


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_torch_multihead_attention(case: dict) -> None:
    torch.manual_seed(case["seed"])
    reference = torch.nn.MultiheadAttention(
        case["d_model"],
        case["heads"],
        bias=case["bias"],
        kdim=case["kdim"],
        vdim=case["vdim"],
        batch_first=case["batch_first"],
    )
    if case["bias"]:  # torch initialises biases to zero; make them count
        with torch.no_grad():
            reference.in_proj_bias.normal_()
            reference.out_proj.bias.normal_()
    reference.train(case["train"])
    dtype = torch.float64 if case["float64"] else torch.float32
    reference.to(dtype)
    ours = attnlab.MultiHeadAttention.from_torch(reference)
    assert ours.out_proj.weight.dtype == dtype
    assert ours.training == case["train"]

    b, t_q = case["batch"], case["t_q"]
    t_k = case["t_k"] if case["cross"] else t_q
    x = torch.randn(b, t_q, case["d_model"], dtype=dtype, requires_grad=True)
    if case["cross"]:
        key = torch.randn(b, t_k, case["kdim"] or case["d_model"], dtype=dtype)
        separate = case["kdim"] or case["distinct_value"]
        value = (
            torch.randn(b, t_k, case["vdim"] or case["d_model"], dtype=dtype) if separate else key
        )
    else:
        key = value = x
    key_padding, attn = _torch_masks(case, t_k)
    key_padding = (
        key_padding.to(dtype)
        if key_padding is not None and key_padding.is_floating_point()
        else key_padding
    )
    attn = attn.to(dtype) if attn is not None and attn.is_floating_point() else attn
    mask = from_torch_masks(key_padding, attn, batch_size=b, num_heads=case["heads"], dtype=dtype)

    def seq_first(t: torch.Tensor) -> torch.Tensor:
        return t if case["batch_first"] else t.transpose(0, 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on mixed bool / float masks
        expected, expected_weights = reference(
            seq_first(x),
            seq_first(key),
            seq_first(value),
            key_padding_mask=key_padding,
            attn_mask=attn,
            need_weights=case["need_weights"],
            average_attn_weights=case["average"],
        )
    expected = seq_first(expected)
    kwargs = {"value": value} if value is not key else {}
    out, weights = ours(
        x,
        key if case["cross"] else None,
        mask=mask,
        need_weights=case["need_weights"],
        average_weights=case["average"] and case["need_weights"],
        **kwargs,
    )
    atol = 1e-12 if case["float64"] else ATOL  # float64: agreement to the last few digits
    torch.testing.assert_close(out, expected, atol=atol, rtol=atol)
    if case["need_weights"]:
        assert weights.shape == expected_weights.shape
        torch.testing.assert_close(weights, expected_weights, atol=atol, rtol=atol)
    else:
        assert weights is None

    # Gradients agree too: wrt the input and every projection weight (fused or separate).
    if ours.in_proj is not None:
        ours_params = [ours.in_proj.weight, ours.out_proj.weight]
        ref_params = [reference.in_proj_weight, reference.out_proj.weight]
    else:
        ours_params = [ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]
        ours_params.append(ours.out_proj.weight)
        ref_params = [reference.q_proj_weight, reference.k_proj_weight, reference.v_proj_weight]
        ref_params.append(reference.out_proj.weight)
    upstream = torch.randn_like(out)
    grad_ours = torch.autograd.grad(out, [x, *ours_params], upstream, allow_unused=True)
    grad_ref = torch.autograd.grad(expected, [x, *ref_params], upstream, allow_unused=True)
    grad_tol = 1e-10 if case["float64"] else 1e-4
    for got, want in zip(grad_ours, grad_ref, strict=True):
        torch.testing.assert_close(got, want, atol=grad_tol, rtol=grad_tol)


def test_inference_fast_path_parity_with_key_padding() -> None:
    """torch's eval fast path (native MHA kernel) and attnlab agree under no_grad."""
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(64, 8, batch_first=True).eval()
    ours = attnlab.MultiHeadAttention.from_torch(reference)
    x = torch.randn(4, 33, 64)
    padding = padding_mask([33, 20, 7, 1], 33)
    with torch.no_grad():
        expected, _ = reference(x, x, x, key_padding_mask=~padding, need_weights=False)
        out, _ = ours(x, mask=key_mask(padding))
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)


def test_round_trip_is_weight_exact() -> None:
    for kdim in (None, 6):
        ours = attnlab.MultiHeadAttention(16, 4, kdim=kdim, vdim=kdim, dropout=0.1)
        back = attnlab.MultiHeadAttention.from_torch(ours.to_torch(batch_first=False))
        for (name, a), (name_b, b) in zip(
            ours.state_dict().items(), back.state_dict().items(), strict=True
        ):
            assert name == name_b
            assert torch.equal(a, b), name
        assert back.dropout == 0.1


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
@pytest.mark.parametrize("heads_kv", [4, 2, 1])
def test_sdpa_matches_torch_sdpa(mask_kind: str, heads_kv: int) -> None:
    torch.manual_seed(1)
    b, h, t, d = 2, 4, 11, 8
    q = torch.randn(b, h, t, d)
    k = torch.randn(b, heads_kv, t, d)
    v = torch.randn(b, heads_kv, t, 5)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(b, 1, t, t) < 0.7
        mask[..., 0] = True
    elif mask_kind == "float":
        mask = torch.randn(b, h, t, t)
    is_causal = mask_kind == "causal"
    k_full = k.repeat_interleave(h // heads_kv, dim=1)
    v_full = v.repeat_interleave(h // heads_kv, dim=1)
    expected = F.scaled_dot_product_attention(
        q, k_full, v_full, attn_mask=mask, is_causal=is_causal
    )
    out = attnlab.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
    out_w, weights = attnlab.scaled_dot_product_attention(
        q, k, v, mask, is_causal=is_causal, return_weights=True
    )
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(out_w, expected, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(b, h, t), atol=1e-6, rtol=0)


def test_causal_is_bottom_right_like_torch_causal_lower_right() -> None:
    """attnlab's causal alignment equals torch's own lower-right causal bias."""
    bias_module = pytest.importorskip("torch.nn.attention.bias")
    torch.manual_seed(2)
    q = torch.randn(2, 3, 4, 8)
    k = torch.randn(2, 3, 9, 8)
    v = torch.randn(2, 3, 9, 8)
    expected = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias_module.causal_lower_right(4, 9)
    )
    out = attnlab.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
    explicit = attnlab.scaled_dot_product_attention(q, k, v, causal_mask(4, 9))
    torch.testing.assert_close(explicit, out, atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["self", "cross", "cross_kdim_vdim"])
def test_project_gives_torchs_per_head_queries_keys_and_values(kind: str) -> None:
    """MultiHeadAttention.project: head i's ``Q W_i^Q``, ``K W_i^K``, ``V W_i^V`` (sec. 3.2.2),
    sliced here from torch's own weights; eq. 1 on them, concatenated and through ``W^O``, is
    torch.nn.MultiheadAttention's output."""
    torch.manual_seed(3)
    e, h, b, t_q, t_k = 16, 4, 2, 3, 5
    kdim, vdim = (7, 5) if kind == "cross_kdim_vdim" else (e, e)
    reference = torch.nn.MultiheadAttention(e, h, kdim=kdim, vdim=vdim, batch_first=True).eval()
    with torch.no_grad():  # torch initialises biases to zero; make them count
        reference.in_proj_bias.normal_()
        reference.out_proj.bias.normal_()
    ours = attnlab.MultiHeadAttention.from_torch(reference)
    x = torch.randn(b, t_q, e)
    if kind == "self":
        context, value, keys_in, values_in = None, None, x, x
    else:
        keys_in, values_in = torch.randn(b, t_k, kdim), torch.randn(b, t_k, vdim)
        context, value = keys_in, values_in
    with torch.no_grad():
        q, k, v = ours.project(x, context, value=value)
        if reference.in_proj_weight is not None:
            w_q, w_k, w_v = reference.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = (
                reference.q_proj_weight,
                reference.k_proj_weight,
                reference.v_proj_weight,
            )
        b_q, b_k, b_v = reference.in_proj_bias.chunk(3)
        d = e // h
        t_kv = t_q if kind == "self" else t_k
        assert q.shape == (b, h, t_q, d) and k.shape == v.shape == (b, h, t_kv, d)
        for i in range(h):
            rows = slice(i * d, (i + 1) * d)
            torch.testing.assert_close(q[:, i], x @ w_q[rows].T + b_q[rows], atol=ATOL, rtol=0)
            torch.testing.assert_close(
                k[:, i], keys_in @ w_k[rows].T + b_k[rows], atol=ATOL, rtol=0
            )
            torch.testing.assert_close(
                v[:, i], values_in @ w_v[rows].T + b_v[rows], atol=ATOL, rtol=0
            )
        heads = attnlab.scaled_dot_product_attention(q, k, v)  # (B, H, T_q, Dh)
        out = ours.out_proj(heads.transpose(1, 2).reshape(b, t_q, e))
        expected, _ = reference(x, keys_in, values_in, need_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)


def test_project_is_what_forward_attends_with_grouped_query_attention() -> None:
    """With H_kv < H (no torch counterpart), project's keys and values have H_kv heads, and
    eq. 1 on its output, through ``W^O``, is forward's output."""
    torch.manual_seed(4)
    mha = attnlab.MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    with torch.no_grad():
        mha.in_proj.bias.normal_()
        x = torch.randn(2, 5, 16)
        q, k, v = mha.project(x)
        assert q.shape == (2, 4, 5, 4) and k.shape == v.shape == (2, 2, 5, 4)
        heads = attnlab.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = mha.out_proj(heads.transpose(1, 2).reshape(2, 5, 16))
        expected, _ = mha(x, is_causal=True)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=1e-5)
