"""attnlab.data.examples: framing id pairs for teacher forcing, its errors, collate."""

from __future__ import annotations

import pytest
import torch

from attnlab.data.batching import TokenBatcher
from attnlab.data.examples import Example, Examples, collate, make_examples, make_lm_examples


def test_make_examples_frames_targets_and_drops_long_pairs() -> None:
    pairs = [([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11]), ([4] * 6, [9]), ([4], [9] * 5)]
    examples = make_examples(pairs, max_len=5)
    # Source 6 > 5: dropped; target tensors len(ids) + 1 = 6 > 5: dropped.
    assert examples.dropped == 2 and len(examples) == 2
    assert examples[0] == Example((5, 6, 7), (1, 8, 9, 2))
    assert examples[1] == Example((5,), (1, 8, 9, 10, 11, 2))
    assert examples.src_lengths.tolist() == [3, 1]
    assert examples.tgt_lengths.tolist() == [3, 5]  # len([bos] + ids)
    assert len(make_examples(pairs, max_len=None)) == 4
    custom = make_examples([([3], [4])], max_len=None, bos_id=7, eos_id=8)
    assert custom[0].tgt == (7, 4, 8)
    lm = make_lm_examples([[4, 5], [6] * 9], max_len=8)
    assert lm.dropped == 1 and lm[0] == Example((), (1, 4, 5, 2))


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([([1], [2]), ([1, 2],)], r"pairs\[1\]: expected a \(src_ids, tgt_ids\) pair"),
        ([([1], [2]), ([1, -2], [3])], r"pairs\[1\]\[0\] \(source\): token ids must be >= 0"),
        ([([1.5], [2])], r"pairs\[0\]\[0\] \(source\): expected a flat sequence of int"),
        ([([1], "abc")], r"pairs\[0\]\[1\] \(target\): expected a sequence of token ids"),
    ],
)
def test_make_examples_errors_name_the_pair(pairs: list, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make_examples(pairs, max_len=None)
    with pytest.raises(ValueError, match="max_len: expected a positive int or None"):
        make_examples([], max_len=0)


def test_collate_pads_right_and_shifts_the_target() -> None:
    examples = make_examples([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])], max_len=None)
    src, tgt_in, tgt_out = collate(examples, [1, 0], pad_id=0)
    assert src.tolist() == [[5, 0, 0], [5, 6, 7]]
    assert tgt_in.tolist() == [[1, 8, 9, 10, 11], [1, 8, 9, 0, 0]]  # [bos] + ids
    assert tgt_out.tolist() == [[8, 9, 10, 11, 2], [8, 9, 2, 0, 0]]  # ids + [eos]
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == torch.int64
    lm_src, lm_in, _ = collate(make_lm_examples([[4, 5]], max_len=None), [0], pad_id=0)
    assert lm_src.shape == (1, 0) and lm_in.tolist() == [[1, 4, 5]]
    with pytest.raises(ValueError, match="indices: expected at least one"):
        collate(examples, [], pad_id=0)


def test_examples_accept_only_framed_examples() -> None:
    with pytest.raises(TypeError, match=r"examples\[0\]: expected an Example"):
        Examples([((1,), (1, 2))])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"examples\[0\]: the target must be framed"):
        Examples([Example((1,), (1,))])
    with pytest.raises(TypeError, match="examples: expected Examples"):
        TokenBatcher.for_examples([Example((1,), (1, 2))], 10)  # type: ignore[arg-type]
