"""Which kernels run: the fast path must really be torch's fused SDPA, and QKV one GEMM.

Kernel names are read from torch.profiler; on CPU torch's fused kernel is
``_scaled_dot_product_flash_attention_for_cpu``.
"""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab.nn.masks import causal_mask, combine_masks, key_mask, padding_mask

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


def op_counts(fn) -> dict[str, int]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {event.key: event.count for event in prof.key_averages()}


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "padding+causal", "rect"])
def test_without_weights_the_fused_kernel_runs_and_no_softmax(mask_kind: str) -> None:
    torch.manual_seed(0)
    t_q = 3 if mask_kind == "rect" else 16
    q = torch.randn(2, 4, t_q, 8)
    k = torch.randn(2, 4, 16, 8)
    v = torch.randn(2, 4, 16, 8)
    padding = key_mask(padding_mask([16, 9]))
    mask = {
        "none": None,
        "padding": padding,
        "causal": None,
        "padding+causal": combine_masks(padding, causal_mask(16)),
        "rect": padding,
    }[mask_kind]
    is_causal = mask_kind in ("causal", "rect")
    ops = op_counts(
        lambda: attnlab.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
    )
    assert ops.get(FLASH) == 1, sorted(ops)
    assert "aten::_softmax" not in ops and "aten::bmm" not in ops


def test_with_weights_the_explicit_path_runs() -> None:
    q = k = v = torch.randn(1, 2, 5, 4)
    ops = op_counts(lambda: attnlab.scaled_dot_product_attention(q, k, v, return_weights=True))
    assert FLASH not in ops
    assert ops.get("aten::_softmax") == 1


def test_self_attention_projects_qkv_with_one_gemm() -> None:
    mha = attnlab.MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        ops = op_counts(lambda: mha(x))
    # one GEMM for q, k, v together and one for W^O
    assert ops.get("aten::linear") == 2, sorted(ops)
    assert ops.get(FLASH) == 1


def test_cross_attention_projects_kv_with_one_gemm() -> None:
    mha = attnlab.MultiHeadAttention(32, 4).eval()
    x, memory = torch.randn(2, 7, 32), torch.randn(2, 11, 32)
    with torch.no_grad():
        ops = op_counts(lambda: mha(x, memory))
    assert ops.get("aten::linear") == 3, sorted(ops)  # q, then k and v together, then W^O
