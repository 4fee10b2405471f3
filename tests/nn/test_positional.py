"""Positional modules as users call them: adding to embeddings, offsets, caching, learned weights.

(Closed forms and the relative-position properties are in test_properties.py.)
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab import LearnedPositionalEmbedding, SinusoidalPositionalEncoding


def test_sinusoidal_adds_the_table_and_steps_match_the_full_sequence() -> None:
    pe = SinusoidalPositionalEncoding(32)
    x = torch.randn(2, 7, 32)
    full = pe(x)
    torch.testing.assert_close(full, x + pe.table(7), atol=0, rtol=0)
    steps = torch.cat([pe(x[:, t : t + 1], offset=t) for t in range(7)], dim=1)
    torch.testing.assert_close(steps, full, atol=0, rtol=0)


def test_sinusoidal_has_no_length_limit() -> None:
    pe = SinusoidalPositionalEncoding(16)
    far = pe.table(3, offset=50_000)  # grows its cache past the first 1024 positions
    assert far.shape == (3, 16)
    pos, i = 50_001, 3  # row 1, channel pair i: columns 6 (sin) and 7 (cos)
    angle = pos / 10000 ** (2 * i / 16)
    assert far[1, 6].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert far[1, 7].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert torch.isfinite(far).all()


def test_sinusoidal_follows_dtype_and_has_no_parameters() -> None:
    pe = SinusoidalPositionalEncoding(8)
    assert list(pe.parameters()) == []
    assert pe.state_dict() == {}  # nothing to save: the table is a function of the position
    x = torch.zeros(1, 5, 8, dtype=torch.float64)
    assert pe(x).dtype == torch.float64
    assert pe(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_learned_embedding_slices_by_offset_and_trains() -> None:
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(10, 4)
    assert emb.weight.shape == (10, 4)
    x = torch.zeros(3, 4, 4)
    torch.testing.assert_close(emb(x, offset=6), emb.weight[6:10].expand(3, 4, 4))
    emb(x, offset=2).sum().backward()
    touched = emb.weight.grad.abs().sum(dim=1) > 0
    assert touched.tolist() == [False, False, True, True, True, True, False, False, False, False]


def test_learned_embedding_refuses_positions_past_max_len() -> None:
    emb = LearnedPositionalEmbedding(10, 4)
    with pytest.raises(ValueError, match=r"positions 8\.\.11 exceed max_len=10"):
        emb(torch.zeros(1, 4, 4), offset=8)


def test_sinusoidal_past_the_cache_is_computed_exactly() -> None:
    pe = SinusoidalPositionalEncoding(8)
    offset = pe.max_cached + 5
    far = pe.table(2, offset=offset)
    assert pe._cache.shape[0] <= pe.max_cached  # nothing huge was cached
    exact = pe.table(2, offset=offset, dtype=torch.float64)
    torch.testing.assert_close(far, exact.float(), atol=0, rtol=0)
    assert far[0, 0].item() == pytest.approx(math.sin(offset), abs=1e-6)
