"""The compiled training step (TrainConfig.compile): the model traces to one graph with
dynamic shapes, a compiled run follows the eager one (dropout included) and resumes exactly,
DDP works with it, and without a C++ compiler training goes on eagerly, saying so."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch

from attnlab.train import TrainConfig, Trainer
from attnlab.train import step as step_module
from attnlab.train.objectives import TranslationObjective

sys.path.insert(0, str(Path(__file__).parents[1]))
import _train_worker as worker
from _train_worker import small_model


def _losses(out: Path) -> list[float]:
    with open(out / "metrics.csv", newline="") as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def _config(out: Path, *, compile: bool, max_steps: int = 12) -> TrainConfig:
    return TrainConfig(
        out=str(out),
        max_tokens=200,
        warmup=10,
        max_steps=max_steps,
        eval_every=100,
        checkpoint_every=6,
        keep_checkpoints=2,
        average_last=1,
        log_every=1,
        compile=compile,
        seed=5,
    )


def test_the_model_traces_to_one_graph_for_every_batch_shape() -> None:
    """No graph break (no host read of a value), and one compilation over batches of other
    sizes and lengths, padded or not: what makes compiling the step pay once."""
    model = small_model(dropout=0.1).train()
    explanation = torch._dynamo.explain(model)(
        torch.randint(3, 20, (4, 7)), torch.randint(3, 20, (4, 6))
    )
    assert explanation.graph_break_count == 0, explanation.break_reasons
    graphs: list[int] = []

    def counting(graph_module: torch.fx.GraphModule, example_inputs: object):
        graphs.append(1)
        return graph_module.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting, dynamic=True)
    for batch, length in [(4, 7), (9, 3), (2, 12), (16, 5)]:
        src = torch.randint(3, 20, (batch, length))
        src[0, -2:] = 0  # padding: a key mask in every batch
        tgt = torch.randint(3, 20, (batch, length + 1))
        out = compiled(src, tgt)
        assert out.shape == (batch, length + 1, model.config.target_vocab_size)
    assert len(graphs) == 1
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_training_follows_eager_and_resumes_exactly(tmp_path: Path) -> None:
    train = worker.reversal_examples(200, seed=0)
    Trainer(
        small_model(dropout=0.1),
        train,
        None,
        _config(tmp_path / "eager", compile=False),
        progress=False,
        objective=TranslationObjective,
    ).train()
    summary = Trainer(
        small_model(dropout=0.1),
        train,
        None,
        _config(tmp_path / "compiled", compile=True),
        progress=False,
        objective=TranslationObjective,
    ).train()
    eager, compiled = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 12 and summary["steps"] == 12
    # The same dropout draws (fallback_random): equal to float rounding, not merely alike.
    for a, b in zip(eager, compiled, strict=True):
        assert b == pytest.approx(a, rel=1e-4)
    log = (tmp_path / "compiled" / "train.log").read_text()
    assert "compile: the training step is compiled" in log

    # Stopped at step 6 and resumed to 12: the uninterrupted compiled run's losses, to float
    # rounding. Not bit for bit: which graphs serve a run depends on the batch shapes that
    # came first in the process (dynamo unifies equal sizes while tracing, and a later batch
    # with unequal ones compiles a second graph, whose sums may round differently).
    halves = tmp_path / "halves"
    Trainer(
        small_model(dropout=0.1),
        train,
        None,
        _config(halves, compile=True, max_steps=6),
        progress=False,
        objective=TranslationObjective,
    ).train()
    Trainer(
        small_model(dropout=0.1),
        train,
        None,
        _config(halves, compile=True),
        progress=False,
        objective=TranslationObjective,
    ).train(resume=True)
    resumed = _losses(halves)
    assert len(resumed) == 12
    for a, b in zip(compiled, resumed, strict=True):
        assert b == pytest.approx(a, rel=1e-5)


def test_without_a_cxx_compiler_training_goes_on_eagerly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_module.shutil, "which", lambda name: None)
    monkeypatch.setenv("CXX", "no-such-c++")
    train = worker.reversal_examples(60, seed=0)
    config = _config(tmp_path / "run", compile=True, max_steps=2)
    Trainer(
        small_model(), train, None, config, progress=False, objective=TranslationObjective
    ).train()
    log = (tmp_path / "run" / "train.log").read_text()
    assert "compile: training eagerly; torch.compile needs a C++ compiler" in log
    assert "'no-such-c++' is not on PATH" in log
    eager = _config(tmp_path / "eager", compile=False, max_steps=2)
    Trainer(
        small_model(), train, None, eager, progress=False, objective=TranslationObjective
    ).train()
    assert _losses(tmp_path / "run") == _losses(tmp_path / "eager")


def test_a_failed_compile_redoes_the_step_eagerly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(loss):
        def fail(*args: object) -> torch.Tensor:
            raise RuntimeError("inductor could not build the kernel\nmore detail")

        return fail

    monkeypatch.setattr(step_module, "compiled_loss", broken)
    train = worker.reversal_examples(60, seed=0)
    Trainer(
        small_model(),
        train,
        None,
        _config(tmp_path / "run", compile=True, max_steps=3),
        progress=False,
        objective=TranslationObjective,
    ).train()
    log = (tmp_path / "run" / "train.log").read_text()
    assert "torch.compile failed (RuntimeError: inductor could not build the kernel)" in log
    eager = _config(tmp_path / "eager", compile=False, max_steps=3)
    Trainer(
        small_model(), train, None, eager, progress=False, objective=TranslationObjective
    ).train()
    assert _losses(tmp_path / "run") == _losses(tmp_path / "eager")


@pytest.mark.slow
def test_two_gloo_processes_with_the_compiled_step_match_one_eager_process(
    tmp_path: Path,
) -> None:
    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    single = tmp_path / "single"
    worker.ddp_trainer(str(single)).train()
    double = tmp_path / "double"
    port = worker.free_port()
    mp.spawn(worker.ddp_worker, args=(2, port, str(double), True), nprocs=2, join=True)
    assert "the training step is compiled" in (double / "train.log").read_text()
    one = load_file(single / "model" / "model.safetensors")
    two = load_file(double / "model" / "model.safetensors")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
    for a, b in zip(_losses(single), _losses(double), strict=True):
        assert b == pytest.approx(a, rel=1e-5)
