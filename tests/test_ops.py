"""attnlab's dropout (``attnlab._ops.dropout``): the drop rate ``p`` at a 2^-16 resolution, drawn
faster than torch's on CPU from torch's generator, unbiased."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab import MultiHeadAttention
from attnlab._ops import dropout

N = 1_000_000


def test_identity_in_evaluation_and_at_zero_rate() -> None:
    x = torch.randn(4, 5)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_drop_rate_and_scale(p: float, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.rand(N, dtype=dtype) + 1.0  # no zeros of its own
    out = dropout(x, p, training=True)
    assert out.dtype == dtype and out.shape == x.shape
    dropped = (out == 0).double()
    # Binomial(N, p): 6 standard deviations is a bound this test misses once in 10^8 runs.
    assert abs(dropped.mean().item() - p) < 6 * math.sqrt(p * (1 - p) / N)
    # Each of the four 16-bit lanes of a 64-bit draw drops at the rate p, and two neighbouring
    # lanes drop together at p^2 (independent).
    lanes = dropped.view(-1, 4)
    for lane in range(4):
        assert abs(lanes[:, lane].mean().item() - p) < 6 * math.sqrt(p * (1 - p) / (N / 4))
    both = (lanes[:, :3] * lanes[:, 1:]).mean().item()
    assert abs(both - p * p) < 6 * math.sqrt(p * p * (1 - p * p) / (3 * N / 4))
    kept = out != 0
    levels = 2**16
    t = round(p * levels)  # the rate at the mask's resolution: t / 2^16, within 2^-17 of p
    assert abs(t / levels - p) <= 2**-17
    expected = x[kept] * torch.tensor(levels / (levels - t), dtype=dtype)
    assert torch.equal(out[kept], expected)


def test_unbiased_in_expectation_and_tiny_rates() -> None:
    torch.manual_seed(4)
    x = torch.ones(N)
    # The scale undoes the rate actually drawn (t / 2^16), so the mean is 1 in expectation.
    for p in (0.1, 0.3):
        mean = dropout(x, p, training=True).double().mean().item()
        assert abs(mean - 1.0) < 6 * math.sqrt(p / (1 - p) / N)
    # A rate below the resolution rounds to no dropout; one just above it drops.
    assert dropout(x, 2**-18, training=True) is x
    assert (dropout(x, 2**-15, training=True) == 0).any()
    odd = torch.ones(3, 7, 5)  # not a multiple of four elements
    assert dropout(odd, 0.5, training=True).shape == odd.shape


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(1)
    x = (torch.rand(1000, 64) + 1.0).requires_grad_()
    out = dropout(x, 0.25, training=True)
    out.sum().backward()
    mask = (out != 0).float()
    torch.testing.assert_close(x.grad, mask / 0.75, rtol=0, atol=1e-6)


def test_same_seed_same_mask() -> None:
    x = torch.ones(100, 100)
    torch.manual_seed(7)
    first = dropout(x, 0.5, training=True)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.5, training=True), first)


def test_attention_dropout_paths_agree_and_average_to_the_expectation() -> None:
    """With dropout on CPU, attention takes its explicit path with or without weights: the same
    seed gives the same output, the output is the dropped weights times V, and the mean over
    many draws approaches the output without dropout (dropout is unbiased)."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4, dropout=0.2).train()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.manual_seed(3)
        plain, _ = mha(x, is_causal=True)
        torch.manual_seed(3)
        with_weights, weights = mha(x, is_causal=True, need_weights=True)
        assert torch.equal(plain, with_weights)
        # Causal: the future gets exactly zero weight even after dropout's rescaling.
        assert torch.all(weights.triu(diagonal=1) == 0)
        mean = torch.stack([mha(x, is_causal=True)[0] for _ in range(3000)]).mean(0)
        expected, _ = mha.eval()(x, is_causal=True)
    assert (mean - expected).abs().max().item() < 0.05
