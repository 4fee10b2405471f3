"""attnlab.train.losses.cross_entropy: the fused label-smoothed loss equals torch's, value and
gradient, and its errors name the argument."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.train.losses import cross_entropy


def _both(logits: torch.Tensor, target: torch.Tensor, ignore: int, eps: float):
    ours = logits.clone().requires_grad_()
    theirs = logits.clone().requires_grad_()
    a = cross_entropy(ours, target, ignore_index=ignore, label_smoothing=eps)
    b = F.cross_entropy(theirs, target, ignore_index=ignore, label_smoothing=eps, reduction="sum")
    weight = torch.tensor(1.7, dtype=logits.dtype)  # an upstream gradient other than 1
    (a * weight).backward()
    (b * weight).backward()
    return a, b, ours.grad, theirs.grad


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("ignore", [0, -100])
def test_value_and_gradient_equal_torch(eps: float, ignore: int) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 53, generator=gen, dtype=torch.float64) * 4
    target = torch.randint(0, 53, (37,), generator=gen)
    target[::5] = ignore  # ignored rows (-100 lies outside the vocabulary, 0 inside)
    a, b, ga, gb = _both(logits, target, ignore, eps)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-12)
    assert bool((ga[::5] == 0).all())  # ignored rows get no gradient


def test_float32_within_rounding_and_gradcheck() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 500, generator=gen) * 3
    target = torch.randint(1, 500, (64,), generator=gen)
    a, b, ga, gb = _both(logits, target, 0, 0.1)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(ga, gb, rtol=1e-5, atol=1e-6)
    small = torch.randn(4, 7, dtype=torch.float64, generator=gen).requires_grad_()
    tgt = torch.tensor([1, 0, 6, 3])
    assert torch.autograd.gradcheck(
        lambda x: cross_entropy(x, tgt, ignore_index=0, label_smoothing=0.2), (small,)
    )


def test_a_retained_graph_runs_backward_twice_alike() -> None:
    logits = torch.randn(5, 9, dtype=torch.float64).requires_grad_()
    loss = cross_entropy(logits, torch.tensor([1, 2, 3, 4, 5]), label_smoothing=0.1)
    (first,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (second,) = torch.autograd.grad(loss, logits)
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def _through_a_layer(inplace: bool, eps: float):
    """A loss over ``h @ W`` (a fresh tensor, as the trainer's logits): the loss, the logits
    afterwards, and the gradients of ``h`` and ``W``."""
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(48, 16, generator=gen).requires_grad_()
    w = torch.randn(16, 301, generator=gen).requires_grad_()
    target = torch.randint(0, 301, (48,), generator=gen)
    target[::7] = 0
    logits = h @ w
    loss = cross_entropy(logits, target, ignore_index=0, label_smoothing=eps, inplace=inplace)
    (loss * 0.3).backward()
    return loss, logits.detach(), h.grad, w.grad, (h.detach() @ w.detach())


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_in_place_is_the_same_loss_and_gradient_bit_for_bit(eps: float) -> None:
    loss, logits, gh, gw, original = _through_a_layer(True, eps)
    loss_ref, logits_ref, gh_ref, gw_ref, _ = _through_a_layer(False, eps)
    assert torch.equal(loss, loss_ref)
    assert torch.equal(gh, gh_ref) and torch.equal(gw, gw_ref)
    assert torch.equal(logits_ref, original)  # out of place: the logits are left alone
    # in place: the logits tensor held the log-probabilities, then the gradient
    assert not torch.equal(logits, original)
    fresh = torch.randn(6, 11).requires_grad_()
    x = fresh * 1.0
    cross_entropy(x, torch.tensor([1, 2, 3, 4, 5, 6]), inplace=True)
    torch.testing.assert_close(x.detach(), torch.log_softmax(fresh.detach(), -1), rtol=0, atol=0)


def test_in_place_refuses_what_would_go_silently_wrong() -> None:
    logits = torch.randn(5, 9).requires_grad_()
    target = torch.tensor([1, 2, 3, 4, 5])
    x = logits * 2.0
    loss = cross_entropy(x, target, inplace=True)
    torch.autograd.grad(loss, logits, retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(loss, logits)  # the saved log-probabilities were overwritten
    y = logits.exp()  # exp saves its output for its backward
    loss = cross_entropy(y, target, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_all_rows_ignored_is_zero_with_zero_gradient() -> None:
    logits = torch.randn(3, 4).requires_grad_()
    loss = cross_entropy(logits, torch.zeros(3, dtype=torch.long), ignore_index=0)
    loss.backward()
    assert loss.item() == 0.0 and bool((logits.grad == 0).all())


@pytest.mark.parametrize(
    ("logits", "target", "eps", "message"),
    [
        (torch.randn(3), torch.zeros(3, dtype=torch.long), 0.0, "logits: expected a .N, V."),
        (torch.randn(3, 4), torch.zeros(2, dtype=torch.long), 0.0, r"target: .*shape \(3,\)"),
        (torch.randn(3, 4), torch.zeros(3), 0.0, "target: expected an integer"),
        (torch.randn(3, 4), torch.zeros(3, dtype=torch.long), 1.0, "label_smoothing"),
    ],
)
def test_errors_name_the_argument(logits, target, eps: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cross_entropy(logits, target, label_smoothing=eps)
