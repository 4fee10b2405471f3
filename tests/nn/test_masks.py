"""Mask builders as users call them: token ids, query and key padding, torch polarity.

(The algebraic properties of causal / padding / combined masks are in test_properties.py.)
"""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.nn.masks import (
    from_torch_masks,
    key_mask,
    padding_mask,
    padding_mask_from_ids,
    pair_mask,
    to_additive_mask,
    to_torch_key_padding_mask,
)


def test_padding_mask_from_ids_marks_real_tokens() -> None:
    ids = torch.tensor([[5, 7, 9, 2], [4, 8, 0, 0]])
    assert padding_mask_from_ids(ids, pad_id=0).tolist() == [
        [True, True, True, True],
        [True, True, False, False],
    ]
    # The same mask as from the lengths (T10's example: lengths 4 and 2).
    assert torch.equal(padding_mask_from_ids(ids, 0), padding_mask([4, 2]))


def test_pair_mask_is_the_square_picture_of_t10() -> None:
    padding = padding_mask([2, 4], 4)
    pair = pair_mask(padding, padding)
    assert pair.shape == (2, 1, 4, 4)
    assert pair[0, 0].int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert pair[1, 0].all()


def test_padded_queries_under_pair_mask_output_only_the_bias() -> None:
    """A padded query has no key to attend to: its attention output is zero, so the module's
    output there is exactly W^O's bias, and no gradient reaches the padded input."""
    torch.manual_seed(0)
    mha = attnlab.MultiHeadAttention(16, 4)
    with torch.no_grad():
        mha.out_proj.bias.normal_()
    padding = padding_mask([5, 3], 5)
    x = torch.randn(2, 5, 16, requires_grad=True)
    out, weights = mha(x, mask=pair_mask(padding, padding), need_weights=True)
    assert torch.equal(out[1, 3:], mha.out_proj.bias.expand(2, 16))
    assert torch.equal(weights[1, :, 3:], torch.zeros(4, 2, 5))
    out[padding].sum().backward()  # a loss over real positions only
    assert torch.equal(x.grad[1, 3:], torch.zeros(2, 16))
    assert x.grad[1, :3].abs().sum() > 0


def test_torch_polarity_round_trip() -> None:
    padding = padding_mask([3, 1], 3)
    torch_style = to_torch_key_padding_mask(padding)
    assert torch_style.tolist() == [[False, False, False], [False, True, True]]
    back = from_torch_masks(torch_style, batch_size=2, num_heads=4)
    assert torch.equal(back, key_mask(padding))


def test_additive_form_of_a_bool_mask() -> None:
    mask = torch.tensor([[True, False]])
    additive = to_additive_mask(mask, torch.float64)
    assert additive.dtype == torch.float64
    assert additive.tolist() == [[0.0, float("-inf")]]
    with pytest.raises(TypeError, match=r"^mask: floating mask has dtype torch.float32"):
        to_additive_mask(torch.zeros(1, 2), torch.float64)
    with pytest.raises(TypeError, match=r"^mask: expected bool or floating dtype, got torch.int64"):
        to_additive_mask(torch.zeros(1, 2, dtype=torch.long))


def test_separate_value_input_matches_torch() -> None:
    """Keys and values from different tensors of the same width (torch's key != value)."""
    torch.manual_seed(3)
    reference = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = attnlab.MultiHeadAttention.from_torch(reference)
    x, key, value = torch.randn(2, 3, 16), torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    expected, _ = reference(x, key, value, need_weights=False)
    out, _ = ours(x, key, value=value)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
