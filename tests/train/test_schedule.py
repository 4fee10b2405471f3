"""The learning-rate schedule of eq. 3 (Vaswani et al. 2017, sec. 5.3).

Tolerances: the scalar form is compared exactly with the closed form written out here (the same
float operations); the tensor form agrees with it to 1e-15 relative (torch's float64 rsqrt is not
correctly rounded); LambdaLR with base_lr 1.0 (or a power of two) gives the very same floats.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR

from attnlab.train.schedule import (
    peak_lr,
    transformer_lambda,
    transformer_lr,
    transformer_lr_tensor,
)


def closed_form(step: float, d_model: float, warmup: float) -> float:
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 16000, 100_000])
def test_closed_form_values(step: int) -> None:
    assert transformer_lr(step) == closed_form(step, 512, 4000)
    assert transformer_lr(step, 256, 8000, factor=2.0) == 2.0 * closed_form(step, 256, 8000)


def test_named_values() -> None:
    # step 1: d^-0.5 * warmup^-1.5; after the warm-up: d^-0.5 * step^-0.5
    assert transformer_lr(1) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-15)
    assert transformer_lr(16000) == pytest.approx(1 / math.sqrt(512 * 16000), rel=1e-15)
    # linear warm-up: step 2000 is half the peak
    assert transformer_lr(2000) == pytest.approx(peak_lr() / 2, rel=1e-15)


def test_peak_is_at_warmup() -> None:
    assert peak_lr() == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-15)
    assert peak_lr() == pytest.approx(7.0e-4, abs=2e-6)  # 6.988e-4, the paper's setting
    assert transformer_lr(4000) == pytest.approx(peak_lr(), rel=1e-15)
    rates = transformer_lr_tensor(torch.arange(1, 20_001))
    assert int(rates.argmax()) + 1 == 4000
    for d_model, warmup in [(256, 100), (1024, 7)]:
        rates = transformer_lr_tensor(torch.arange(1, 1001), d_model, warmup)
        assert int(rates.argmax()) + 1 == warmup
        assert float(rates.max()) == pytest.approx(peak_lr(d_model, warmup), rel=1e-15)


def test_rises_then_falls() -> None:
    rates = transformer_lr_tensor(torch.arange(1, 20_001))
    steps = torch.diff(rates)
    assert bool((steps[:3999] > 0).all())  # steps 1 -> 4000
    assert bool((steps[3999:] < 0).all())  # steps 4000 -> 20000


def test_tensor_form_matches_scalar() -> None:
    steps = torch.tensor([[1, 7, 3999], [4000, 4001, 123_456]])
    rates = transformer_lr_tensor(steps, 512, 4000, factor=0.5)
    assert rates.shape == steps.shape and rates.dtype == torch.float64
    expected = torch.tensor(
        [[transformer_lr(int(s), 512, 4000, 0.5) for s in row] for row in steps.tolist()],
        dtype=torch.float64,
    )
    torch.testing.assert_close(rates, expected, rtol=1e-15, atol=0)
    # floating steps too (a continuous curve), and empty input
    half = transformer_lr_tensor(torch.tensor([1.5, 4000.5]))
    torch.testing.assert_close(
        half, torch.tensor([transformer_lr(1.5), transformer_lr(4000.5)], dtype=torch.float64)
    )
    assert transformer_lr_tensor(torch.empty(0)).shape == (0,)


@pytest.mark.parametrize("base_lr", [1.0, 2.0, 0.5])
def test_lambda_lr_gives_the_schedule_exactly(base_lr: float) -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=base_lr)
    scheduler = LambdaLR(optimizer, transformer_lambda(64, 10, factor=1.0, base_lr=base_lr))
    for step in range(1, 41):  # the rate used by update `step` is eq. 3 at `step` (1-based)
        assert optimizer.param_groups[0]["lr"] == transformer_lr(step, 64, 10)
        assert scheduler.get_last_lr() == [transformer_lr(step, 64, 10)]
        optimizer.step()
        scheduler.step()


def test_lambda_lr_other_base_lr_agrees_to_rounding() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1e-3)
    scheduler = LambdaLR(optimizer, transformer_lambda(512, 4000, base_lr=1e-3))
    for step in range(1, 6):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(transformer_lr(step), rel=1e-15)
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: transformer_lr(0), "step"),
        (lambda: transformer_lr(-3), "step"),
        (lambda: transformer_lr(0.5), "step"),
        (lambda: transformer_lr(float("nan")), "step"),
        (lambda: transformer_lr(True), "step"),
        (lambda: transformer_lr("1"), "step"),
        (lambda: transformer_lr(1, d_model=0), "d_model"),
        (lambda: transformer_lr(1, warmup=-4000), "warmup"),
        (lambda: transformer_lr(1, factor=0.0), "factor"),
        (lambda: transformer_lr(1, factor=float("inf")), "factor"),
        (lambda: peak_lr(warmup=0), "warmup"),
        (lambda: transformer_lr_tensor(torch.tensor([1, 0])), "steps"),
        (lambda: transformer_lr_tensor(torch.tensor([float("nan")])), "steps"),
        (lambda: transformer_lr_tensor(torch.tensor([1]), d_model=-1), "d_model"),
        (lambda: transformer_lambda(warmup=0), "warmup"),
        (lambda: transformer_lambda(base_lr=0.0), "base_lr"),
    ],
)
def test_bad_values_name_the_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        call()


def test_bad_types() -> None:
    with pytest.raises(TypeError, match="steps: expected a Tensor"):
        transformer_lr_tensor([1, 2])
    with pytest.raises(TypeError, match="steps: expected an integer or floating"):
        transformer_lr_tensor(torch.tensor([True]))
