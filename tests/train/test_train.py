"""attnlab.train: the loss and its normalisation, the schedule, checkpoints and their average,
metrics, early stopping, exact resume after SIGKILL, and DDP against one process."""

from __future__ import annotations

import copy
import csv
import json
import math
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from attnlab.data.batching import TokenBatcher
from attnlab.data.examples import collate, make_lm_examples
from attnlab.models.transformer import (
    Transformer,
    TransformerConfig,
    TransformerLM,
    load_pretrained,
)
from attnlab.train import METRICS_COLUMNS, TrainConfig, Trainer, find_checkpoints
from attnlab.train.objectives import LanguageModelObjective, TranslationObjective
from attnlab.train.rng import capture_rng, restore_rng
from attnlab.train.schedule import transformer_lr

sys.path.insert(0, str(Path(__file__).parents[1]))
import _train_worker as worker
from _train_worker import small_model

WORKER = Path(__file__).parents[1] / "_train_worker.py"


pytestmark = pytest.mark.usefixtures("one_thread")


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# -- TrainConfig -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_tokens", 0, "max_tokens: expected a positive int"),
        ("accumulate", 1.5, "accumulate: expected a positive int"),
        ("warmup", True, "warmup: expected a positive int"),
        ("lr_factor", -1.0, "lr_factor: expected a positive number"),
        ("betas", (0.9, 1.0), "betas: expected two numbers in [0, 1)"),
        ("label_smoothing", 1.0, "label_smoothing: expected a number in [0, 1)"),
        ("clip_norm", 0.0, "clip_norm: expected a positive number"),
        ("max_minutes", float("nan"), "max_minutes: expected a positive number"),
        ("device", "tpu", "device: expected 'auto', 'cpu' or 'cuda'"),
        ("average_last", 6, "average_last: 6 checkpoints to average, but only keep_checkpoints=5"),
        ("patience", 0, "patience: expected a positive int"),
        ("seed", -1, "seed: expected a non-negative int"),
    ],
)
def test_config_errors_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig(out="run", max_steps=10, **{field: value})


def test_config_needs_a_bound_and_round_trips_through_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_steps, max_epochs, max_minutes: all None"):
        TrainConfig(out="run")
    config = TrainConfig(out=tmp_path / "run", max_epochs=3, betas=(0.8, 0.9), clip_norm=None)
    assert config.out == str(tmp_path / "run")
    again = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.betas == (0.8, 0.9)
    with pytest.raises(ValueError, match=r"unknown TrainConfig fields \['learning_rate'\]"):
        TrainConfig.from_dict({**config.to_dict(), "learning_rate": 1.0})


# -- one step, computed by hand ------------------------------------------------------------------


def test_one_step_matches_the_paper_recipe_by_hand(tmp_path: Path) -> None:
    """Loss = label-smoothed CE summed over the non-pad targets of *both* accumulation
    micro-batches / their token count; Adam(0.9, 0.98, 1e-9) at eq. 3's rate for step 1;
    the gradient norm clipped. The trainer's first update equals this one written out."""
    train = worker.reversal_examples(40, seed=0)
    model = small_model()
    reference = copy.deepcopy(model)
    config = TrainConfig(
        out=str(tmp_path / "run"),
        max_tokens=64,
        accumulate=2,
        warmup=10,
        lr_factor=3.0,
        clip_norm=0.5,
        label_smoothing=0.1,
        max_steps=1,
        keep_checkpoints=1,
        average_last=1,
        device="cpu",
    )
    trainer = Trainer(model, train, None, config, progress=False, objective=TranslationObjective)
    micro = trainer.batcher.batches(0)[:2]
    assert micro[0] and micro[1]
    trainer.train()

    losses, tokens = [], 0
    for indices in micro:
        src, tgt_in, tgt_out = collate(train, indices, pad_id=0)
        logits = reference(src, tgt_in)
        losses.append(
            F.cross_entropy(
                logits.flatten(0, 1),
                tgt_out.flatten(),
                ignore_index=0,
                label_smoothing=0.1,
                reduction="sum",
            )
        )
        tokens += int((tgt_out != 0).sum())
    loss = sum(losses) / tokens
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    assert norm > 0.5  # clipping is exercised
    optimizer = torch.optim.Adam(
        reference.parameters(), lr=transformer_lr(1, 32, 10, 3.0), betas=(0.9, 0.98), eps=1e-9
    )
    optimizer.step()
    lr = transformer_lr(1, 32, 10, 3.0)
    for (name, trained), expected in zip(
        model.named_parameters(), reference.parameters(), strict=True
    ):
        if name.endswith("attn.in_proj.bias"):
            # The key biases get no gradient (softmax ignores a shift of all scores), only
            # rounding, whose sign Adam's first step (+-lr) turns into a move either way.
            d = trained.shape[0] // 3
            keys = slice(d, 2 * d)
            torch.testing.assert_close(trained[keys], expected[keys], rtol=0, atol=2.01 * lr)
            trained = torch.cat([trained[:d], trained[2 * d :]])
            expected = torch.cat([expected[:d], expected[2 * d :]])
        torch.testing.assert_close(trained, expected, rtol=1e-5, atol=1e-6, msg=name)
    (row,) = read_rows(tmp_path / "run" / "metrics.csv")
    assert float(row["loss"]) == pytest.approx(loss.item(), rel=1e-6)
    assert float(row["lr"]) == lr


# -- a whole run: files, averaging, learning -----------------------------------------------------


def test_a_run_learns_and_writes_metrics_checkpoints_and_the_averaged_model(
    tmp_path: Path,
) -> None:
    tokenizers = tmp_path / "tok"
    tokenizers.mkdir()
    (tokenizers / "tokenizer.json").write_text('{"fake": true}\n')
    train = worker.reversal_examples(300, seed=0)
    valid = worker.reversal_examples(40, seed=1)
    copy_task = [type(e)(e.src, (1, *e.src, 2)) for e in train]  # learnable fast: copying
    valid_copy = [type(e)(e.src, (1, *e.src, 2)) for e in valid]
    out = tmp_path / "run"
    config = TrainConfig(
        out=str(out),
        max_tokens=400,
        warmup=40,
        max_steps=120,
        eval_every=40,
        checkpoint_every=20,
        keep_checkpoints=3,
        average_last=3,
        log_every=20,
        label_smoothing=0.0,
    )
    calls: list[int] = []

    def hook(step: int, model: torch.nn.Module) -> dict[str, float]:
        assert not model.training
        calls.append(step)
        return {"bleu": float(step) / 10}

    summary = Trainer(
        small_model(),
        copy_task,
        valid_copy,
        config,
        tokenizers_dir=tokenizers,
        on_evaluate=hook,
        objective=TranslationObjective,
    ).train()

    rows = read_rows(out / "metrics.csv")
    assert list(rows[0]) == [*METRICS_COLUMNS, "bleu"]  # the hook's key widened the header
    assert [int(r["step"]) for r in rows] == [20, 40, 60, 80, 100, 120]
    assert calls == [40, 80, 120]
    assert [r["bleu"] for r in rows] == ["", "4.0", "", "8.0", "", "12.0"]
    val = [float(r["val_loss"]) for r in rows if r["val_loss"]]
    assert val[-1] < 0.6 * val[0], val  # it learns
    assert all(float(r["tokens_per_s"]) > 0 for r in rows)

    kept = find_checkpoints(out)
    assert [p.name for p in kept] == ["step-00000080", "step-00000100", "step-00000120"]
    state = json.loads((kept[-1] / "state.json").read_text())
    assert state["step"] == 120 and state["train_config"] == config.to_dict()
    assert set(state["rng"][0]) == {"torch", "python", "numpy"}
    assert not list((out / "checkpoints").glob(".tmp-*"))

    # out/model is the element-wise mean of the last 3 checkpoints, and loads.
    averaged = load_file(out / "model" / "model.safetensors")
    for name, tensor in averaged.items():
        stack = torch.stack([load_file(p / "model.safetensors")[name].double() for p in kept])
        torch.testing.assert_close(tensor, stack.mean(0).float(), rtol=0, atol=1e-7)
    model = load_pretrained(out / "model")
    assert isinstance(model, Transformer)
    assert (out / "model" / "tokenizer.json").read_text() == '{"fake": true}\n'

    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["steps"] == 120 and summary["stop_reason"] == "max_steps"
    assert summary["best_val_loss"] == min(val) and summary["last_val_loss"] == val[-1]
    assert summary["averaged_checkpoints"] == [p.name for p in kept]

    # Resuming the finished run has nothing to do. It ignores what a crash leaves: a row cut
    # short, a checkpoint directory being written, a step directory missing files.
    metrics = (out / "metrics.csv").read_text()
    with open(out / "metrics.csv", "a") as handle:
        handle.write("121,13.4")
    (out / "checkpoints" / ".tmp-crashed").mkdir()
    (out / "checkpoints" / ".tmp-crashed" / "model.safetensors").write_bytes(b"partial")
    (out / "checkpoints" / "step-00000999").mkdir()
    again = Trainer(
        small_model(), copy_task, valid_copy, config, progress=False, objective=TranslationObjective
    ).train(resume=True)
    assert again["resumed_from_step"] == 120 and again["steps"] == 120
    assert (out / "metrics.csv").read_text() == metrics
    assert calls == [40, 80, 120]
    assert not (out / "checkpoints" / ".tmp-crashed").exists()

    # A second fresh run into the same directory is refused; resume would continue it.
    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        Trainer(
            small_model(), copy_task, None, config, progress=False, objective=TranslationObjective
        ).train()
    changed = TrainConfig(**{**config.to_dict(), "max_tokens": 200, "betas": (0.9, 0.98)})
    with pytest.raises(ValueError, match="max_tokens=400 -> 200"):
        Trainer(
            small_model(), copy_task, None, changed, progress=False, objective=TranslationObjective
        ).train(resume=True)


def test_early_stopping_counts_evaluations_without_improvement(tmp_path: Path) -> None:
    # A rate so small that float32 weights cannot move: the validation loss never improves.
    config = TrainConfig(
        out=str(tmp_path / "run"),
        max_tokens=64,
        lr_factor=1e-30,
        max_steps=50,
        eval_every=2,
        patience=2,
        keep_checkpoints=1,
        average_last=1,
        log_every=100,
    )
    train = worker.reversal_examples(30, seed=0)
    valid = worker.reversal_examples(8, seed=1)
    summary = Trainer(
        small_model(), train, valid, config, progress=False, objective=TranslationObjective
    ).train()
    # Evaluations at steps 2 (the best), 4 and 6 (no better): stop after the second miss.
    assert summary["stop_reason"] == "early_stopping"
    assert summary["steps"] == 6 and summary["best_step"] == 2
    rows = read_rows(tmp_path / "run" / "metrics.csv")
    assert [r["step"] for r in rows] == ["2", "4", "6"]
    assert len({r["val_loss"] for r in rows}) == 1


def test_max_minutes_and_tensorboard_scalars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnlab.train.metrics as train_module

    logged: list[tuple[str, float, int]] = []

    class Writer:
        def add_scalar(self, key: str, value: float, step: int) -> None:
            logged.append((key, value, step))

        def close(self) -> None:
            logged.append(("closed", 0.0, 0))

    monkeypatch.setattr(train_module, "open_tensorboard", lambda out: Writer())
    config = TrainConfig(
        out=str(tmp_path / "run"),
        max_tokens=64,
        max_steps=1000,
        max_minutes=1e-9,
        keep_checkpoints=1,
        average_last=1,
    )
    train = worker.reversal_examples(20, seed=0)
    summary = Trainer(
        small_model(), train, train[:4], config, progress=False, objective=TranslationObjective
    ).train()
    assert summary["stop_reason"] == "max_minutes" and summary["steps"] == 1
    keys = {key for key, _, _ in logged}
    assert {"loss", "lr", "val_loss", "tokens_per_s", "closed"} <= keys
    assert all(step == 1 for key, _, step in logged if key != "closed")


def test_max_epochs_bf16_and_a_language_model(tmp_path: Path) -> None:
    sequences = [list(range(4, 4 + n)) for n in range(2, 12)] * 3
    examples = make_lm_examples(sequences, max_len=16)
    config = TrainConfig(
        out=str(tmp_path / "lm"),
        max_tokens=64,
        warmup=5,
        max_epochs=2,
        bf16=True,
        keep_checkpoints=1,
        average_last=1,
    )
    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig.preset("tiny", vocab_size=16, d_model=32, d_ff=64))
    before = [p.detach().clone() for p in model.parameters()]
    summary = Trainer(
        model, examples, examples[:5], config, progress=False, objective=LanguageModelObjective
    ).train()
    assert summary["stop_reason"] == "max_epochs" and summary["epochs"] == 2.0
    assert math.isfinite(summary["last_val_loss"])
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert isinstance(load_pretrained(tmp_path / "lm" / "model"), TransformerLM)


def test_progress_goes_to_stderr_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = worker.reversal_examples(20, seed=0)
    for progress, name in ((True, "a"), (False, "b")):
        config = TrainConfig(
            out=str(tmp_path / name),
            max_tokens=64,
            max_steps=3,
            log_every=1,
            keep_checkpoints=1,
            average_last=1,
        )
        Trainer(
            small_model(), train, None, config, progress=progress, objective=TranslationObjective
        ).train()
        captured = capsys.readouterr()
        assert captured.out == ""
        # Not a terminal: plain lines (tests/train/test_progress.py), not a bar's redraws.
        assert ("step 3/3 (100%) loss " in captured.err) == progress
        assert "\r" not in captured.err and (captured.err == "") != progress


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    config = TrainConfig(out=str(tmp_path / "run"), max_steps=1)
    train = worker.reversal_examples(5, seed=0)
    too_big = [type(e)(e.src, (1, 99, 2)) for e in train]
    with pytest.raises(ValueError, match=r"train_examples\[0\]: target id 99 is outside"):
        Trainer(small_model(), too_big, None, config, objective=TranslationObjective)
    no_source = [type(e)((), e.tgt) for e in train]
    with pytest.raises(ValueError, match=r"train_examples\[0\]: empty source"):
        Trainer(small_model(), no_source, None, config, objective=TranslationObjective)
    long_valid = worker.reversal_examples(3, seed=0, long_every=1)  # 21 target tokens
    short_budget = TrainConfig(out=str(tmp_path / "run"), max_steps=1, max_tokens=16)
    with pytest.raises(ValueError, match="valid_examples: max_tokens: example 0's source has 20"):
        Trainer(small_model(), train, long_valid, short_budget, objective=TranslationObjective)
    with pytest.raises(ValueError, match="patience: early stopping needs valid_examples"):
        Trainer(
            small_model(),
            train,
            None,
            TrainConfig(out="r", max_steps=1, patience=2),
            objective=TranslationObjective,
        )
    with pytest.raises(FileNotFoundError, match=r"tokenizers_dir: .* holds none of"):
        Trainer(
            small_model(),
            train,
            None,
            config,
            tokenizers_dir=tmp_path,
            objective=TranslationObjective,
        )
    with pytest.raises(
        TypeError, match=r"^model: TranslationObjective trains an attnlab Transformer, got Linear"
    ):
        Trainer(torch.nn.Linear(2, 2), train, None, config, objective=TranslationObjective)
    other = TokenBatcher.for_examples(long_valid, 4096)  # 3 examples, not 5
    with pytest.raises(ValueError, match=r"^batcher: expected one over the 5 training examples"):
        Trainer(small_model(), train, None, config, batcher=other, objective=TranslationObjective)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: 'cuda' was requested"):
            Trainer(
                small_model(),
                train,
                None,
                TrainConfig(out="r", max_steps=1, device="cuda"),
                objective=TranslationObjective,
            )


def test_rng_states_round_trip_through_json() -> None:
    device = torch.device("cpu")
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    random.gauss(0, 1)  # a cached Gaussian is part of Python's state
    state = json.loads(json.dumps(capture_rng(device)))
    first = (
        torch.rand(3),
        random.random(),
        random.gauss(0, 1),
        np.random.rand(),
        np.random.randn(),
    )
    restore_rng(state, device)
    again = (
        torch.rand(3),
        random.random(),
        random.gauss(0, 1),
        np.random.rand(),
        np.random.randn(),
    )
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


# -- resume after SIGKILL: the same losses, bit for bit ------------------------------------------


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_uninterrupted_losses_bit_for_bit(tmp_path: Path) -> None:
    """Two runs of the same small training (dropout 0.1, accumulation 2, evaluations whose
    hook draws from every global RNG): one uninterrupted, one SIGKILLed right after its
    mid-epoch checkpoint at step 6 and resumed. Every metrics row, hence every logged loss,
    learning rate and validation loss, is the same string in both, and so are the weights."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    command = [sys.executable, str(WORKER)]
    uninterrupted = subprocess.Popen([*command, str(full)], stderr=subprocess.PIPE, text=True)
    crash = subprocess.run(
        [*command, str(killed), "--kill-after", "6"], capture_output=True, text=True, timeout=120
    )
    assert crash.returncode == -signal.SIGKILL, crash.stderr
    assert not (killed / "summary.json").exists()
    newest = find_checkpoints(killed)[-1]
    state = json.loads((newest / "state.json").read_text())
    assert 6 <= state["step"] < 14 and state["batch_in_epoch"] > 0  # mid-epoch
    rows_at_kill = read_rows(killed / "metrics.csv")

    resumed = subprocess.run(
        [*command, str(killed), "--resume"], capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    _, err = uninterrupted.communicate(timeout=120)
    assert uninterrupted.returncode == 0, err

    summary = json.loads((killed / "summary.json").read_text())
    assert summary["resumed_from_step"] == state["step"]
    compared = [c for c in read_rows(full / "metrics.csv")[0] if c != "tokens_per_s"]
    assert {"loss", "val_loss", "hook_torch", "hook_python"} <= set(compared)

    def table(rows: list[dict[str, str]]) -> list[list[str]]:
        return [[row[c] for c in compared] for row in rows]

    expected, got = read_rows(full / "metrics.csv"), read_rows(killed / "metrics.csv")
    assert [int(r["step"]) for r in got] == list(range(1, 15))
    assert table(got) == table(expected)
    assert len(rows_at_kill) >= state["step"]  # rows written before the kill were kept...
    after = [r for r in got if int(r["step"]) > state["step"]]
    assert len(after) == 14 - state["step"]  # ...and those past the checkpoint rewritten
    assert all(r["loss"] for r in after)
    for name in ("model", f"checkpoints/{find_checkpoints(full)[-1].name}"):
        a, b = (
            load_file(full / name / "model.safetensors"),
            load_file(killed / name / "model.safetensors"),
        )
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


# -- distributed: 2 gloo processes = 1 process on the same global batches --------------------


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    single = tmp_path / "single"
    worker.ddp_trainer(str(single)).train()
    first = worker.ddp_trainer(str(tmp_path / "x"))
    assert 1 in [len(b) for b in first.batcher.global_batches(0)[:6]]  # an empty share occurs

    double = tmp_path / "double"
    mp.spawn(worker.ddp_worker, args=(2, worker.free_port(), str(double)), nprocs=2, join=True)

    one, two = (
        load_file(single / "model" / "model.safetensors"),
        load_file(double / "model" / "model.safetensors"),
    )
    assert one.keys() == two.keys()
    moved = load_file(find_checkpoints(single)[-1] / "model.safetensors")
    initial = worker.tiny_model(0.0).state_dict()
    assert any(not torch.equal(moved[k], initial[k]) for k in moved)  # training changed them
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
    rows_one, rows_two = read_rows(single / "metrics.csv"), read_rows(double / "metrics.csv")
    assert [r["step"] for r in rows_two] == ["1", "2", "3"]
    for a, b in zip(rows_one, rows_two, strict=True):
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-5)
        assert a["lr"] == b["lr"]
    assert float(rows_two[-1]["val_loss"]) == pytest.approx(
        float(rows_one[-1]["val_loss"]), rel=1e-5
    )
    summary = json.loads((double / "summary.json").read_text())
    assert (
        summary["world_size"] == 2
        and summary["train_tokens"]
        == json.loads((single / "summary.json").read_text())["train_tokens"]
    )


# -- a new task is one objective -----------------------------------------------------------------


def test_a_new_task_is_one_objective_and_the_loop_is_unchanged(tmp_path: Path) -> None:
    """A toy regression task (a model predicting a number from 4 features, with its own data,
    loss, metric column and validation metric) trains through the unchanged Trainer once it is
    handed its objective (as a task names its own): checkpoints, metrics, the averaged model
    and the summary all come from the loop; everything task-specific from the objective, which
    is required."""
    from dataclasses import asdict, dataclass

    from attnlab.data.images import ImageBatcher
    from attnlab.models.saved import PretrainedModel
    from attnlab.train.metrics import metrics_columns

    @dataclass
    class ToyConfig:
        d_model: int = 4

        def to_dict(self) -> dict[str, int]:
            return asdict(self)

    class Toy(PretrainedModel):
        model_type = "toy"
        config_class = ToyConfig

        def __init__(self, config: ToyConfig) -> None:
            super().__init__()
            self.config = config
            self.linear = torch.nn.Linear(config.d_model, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).squeeze(-1)

    class Regression:
        model_class = Toy
        unit = "examples"
        columns = metrics_columns("examples_per_s", ("val_close",))
        rate_unit = "ex/s"
        validation_counts = ("close",)

        def __init__(self, model: Toy, config: TrainConfig, device: torch.device) -> None:
            self.config = config

        def prepare(self, data: object, name: str) -> tuple[torch.Tensor, torch.Tensor]:
            assert isinstance(data, tuple), name
            return data

        def batcher(self, data, name, **options):
            return ImageBatcher(len(data[0]), 8, **options)

        def collate(self, data, indices):
            return data[0][indices], data[1][indices]

        def count(self, batch) -> int:
            return len(batch[1])

        def loss(self, module, batch) -> torch.Tensor:
            return F.mse_loss(module(batch[0]), batch[1], reduction="sum")

        def evaluate_batch(self, module, batch):
            predicted = module(batch[0])
            close = int(((predicted - batch[1]).abs() < 0.1).sum())
            return F.mse_loss(predicted, batch[1], reduction="sum"), {"close": close}

        def validation_metrics(self, sums, count):
            return {"val_close": sums["close"] / count}

        def dummy_loss(self, module) -> torch.Tensor:
            return module(torch.zeros(1, 4)).sum() * 0.0

        def fingerprint(self, data) -> str:
            return str(len(data[0]))

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.3
    torch.manual_seed(0)
    config = TrainConfig(
        out=str(tmp_path / "run"),
        schedule="cosine",
        lr=0.1,
        warmup=2,
        max_steps=40,
        eval_every=20,
        checkpoint_every=20,
        keep_checkpoints=2,
        average_last=1,
        log_every=10,
    )
    toy = Toy(ToyConfig())
    with pytest.raises(TypeError, match="required keyword-only argument: 'objective'"):
        Trainer(toy, (x, y), None, config)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^objective: expected an Objective class .*got None"):
        Trainer(toy, (x, y), None, config, objective=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model: Regression trains an attnlab Toy, got Linear"):
        Trainer(torch.nn.Linear(4, 1), (x, y), None, config, objective=Regression)
    summary = Trainer(
        toy, (x, y), (x[:16], y[:16]), config, objective=Regression, progress=False
    ).train()
    assert summary["steps"] == 40 and summary["train_examples"] == 40 * 8
    rows = read_rows(tmp_path / "run" / "metrics.csv")
    assert list(rows[0])[:7] == list(Regression.columns)
    losses = [float(r["loss"]) for r in rows]
    assert losses[-1] < 0.1 * losses[0]  # it learns the linear map
    validations = [r for r in rows if r["val_loss"]]
    assert [int(r["step"]) for r in validations] == [20, 40]
    assert float(validations[1]["val_loss"]) < float(validations[0]["val_loss"])
    assert all(0.0 <= float(r["val_close"]) <= 1.0 for r in validations)
    kept = find_checkpoints(tmp_path / "run")
    assert [p.name for p in kept] == ["step-00000020", "step-00000040"]
