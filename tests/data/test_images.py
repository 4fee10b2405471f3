"""Images for the Vision Transformer: the digits data, batches, augmentation, the classifier's
training (loss, schedule, weight decay, resume) and scoring, and `attnlab train --task digits`.

The full recipe (>= 97% test accuracy in 3,000 steps) is `make train-digits`; the smoke
training here is shorter and only has to beat chance (10%) by a wide margin.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from attnlab import VisionConfig, VisionTransformer, load_pretrained
from attnlab.cli import main
from attnlab.data.images import ImageBatcher, LabelledImages, digits, random_affine
from attnlab.inference.scores import classify
from attnlab.jobs import Job
from attnlab.train import TrainConfig, Trainer
from attnlab.train.objectives import ImageClassificationObjective
from attnlab.train.optim import build_optimizer
from attnlab.train.schedule import cosine_lambda, cosine_lr


@pytest.fixture(scope="module")
def splits():
    return digits()


def tiny_vit(**overrides) -> VisionTransformer:
    torch.manual_seed(0)
    options = {"d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 2, **overrides}
    return VisionTransformer(VisionConfig.preset("digits", **options))


# -- data --------------------------------------------------------------------------------------


def test_digits_splits_are_disjoint_stratified_and_cover_every_image(splits):
    sizes = {k: len(v) for k, v in splits.items()}
    assert sizes == {"train": 1257, "valid": 180, "test": 360}
    images = torch.cat([splits[k].images for k in ("train", "valid", "test")]).flatten(1)
    assert len(torch.unique(images, dim=0)) >= 1790  # the source has a few duplicate images
    for split in splits.values():
        assert split.image_shape == (1, 8, 8)
        assert float(split.images.min()) >= 0.0 and float(split.images.max()) <= 1.0
        assert split.classes == tuple("0123456789")
    # Stratified: each class's share of the test set is within one image of its share overall.
    from attnlab.data.images import load_digits_arrays

    overall = torch.bincount(
        torch.from_numpy(load_digits_arrays()[1].astype("int64")), minlength=10
    )
    overall = overall / 1797
    counts = torch.bincount(splits["test"].labels, minlength=10)
    assert (counts - overall * 360).abs().max() <= 1.0
    again = digits()
    assert torch.equal(again["test"].images, splits["test"].images)
    other = digits(seed=1)
    assert not torch.equal(other["test"].labels, splits["test"].labels)


def test_digits_rejects_sizes_that_leave_nothing_to_train_on():
    with pytest.raises(ValueError, match="valid_size, test_size: 1000 \\+ 797"):
        digits(valid_size=1000, test_size=797)
    with pytest.raises(ValueError, match="test_size: expected a non-negative int"):
        digits(test_size=-1)


@pytest.mark.parametrize(
    ("images", "labels", "classes", "match"),
    [
        (torch.zeros(2, 8, 8), torch.zeros(2, dtype=torch.long), "ab", "images: expected a float"),
        (torch.zeros(2, 1, 8, 8, dtype=torch.long), torch.zeros(2), "ab", "images: expected"),
        (torch.full((1, 1, 2, 2), math.nan), torch.zeros(1, dtype=torch.long), "ab", "NaN"),
        (torch.zeros(2, 1, 2, 2), torch.zeros(3, dtype=torch.long), "ab", "3 labels for 2"),
        (torch.zeros(2, 1, 2, 2), torch.zeros(2), "ab", "labels: expected an int tensor"),
        (torch.zeros(1, 1, 2, 2), torch.tensor([2]), "ab", r"lie in \[0, 2\)"),
        (torch.zeros(1, 1, 2, 2), torch.tensor([0]), "", "classes: expected at least one"),
    ],
)
def test_labelled_images_reject_bad_input(images, labels, classes, match):
    with pytest.raises(ValueError, match=match):
        LabelledImages(images, labels, classes)


def test_image_batcher_visits_every_image_once_per_epoch_and_shards_exactly():
    batcher = ImageBatcher(103, 10, seed=3)
    for epoch in range(3):
        batches = batcher.batches(epoch)
        assert len(batches) == batcher.num_batches(epoch) == 11
        assert sorted(i for b in batches for i in b) == list(range(103))
        assert batches == ImageBatcher(103, 10, seed=3).batches(epoch)  # deterministic
    assert batcher.batches(0) != batcher.batches(1)
    assert ImageBatcher(5, 2, shuffle=False).batches(7) == [[0, 1], [2, 3], [4]]
    shards = [ImageBatcher(103, 10, seed=3, num_replicas=3, rank=r) for r in range(3)]
    for j, global_batch in enumerate(batcher.global_batches(2)):
        joined = [i for s in shards for i in s.batches(2)[j]]
        assert joined == global_batch
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < num_replicas=2"):
        ImageBatcher(10, 2, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="batch_size: expected a positive int"):
        ImageBatcher(10, 0)


def test_random_affine_without_motion_is_the_identity_and_stays_in_frame():
    images = torch.rand(6, 1, 8, 8)
    still = random_affine(images, rotation=0.0, scale=0.0, shift=0.0)
    torch.testing.assert_close(still, images, atol=1e-6, rtol=0)
    g = torch.Generator().manual_seed(0)
    moved = random_affine(images, generator=g)
    assert moved.shape == images.shape and not torch.allclose(moved, images)
    assert float(moved.min()) >= 0.0 and float(moved.max()) <= 1.0 + 1e-6  # bilinear, zero fill
    again = random_affine(images, generator=torch.Generator().manual_seed(0))
    assert torch.equal(moved, again)
    # A whole-pixel shift with no turn or scale moves the picture and brings in zeros.
    dot = torch.zeros(1, 1, 8, 8)
    dot[0, 0, 4, 4] = 1.0
    shifted = random_affine(dot, rotation=0.0, scale=0.0, shift=3.0, generator=g)
    assert abs(float(shifted.sum()) - 1.0) < 1e-5 or float(shifted.sum()) < 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rotation": 180.0}, r"rotation: expected a number in \[0, 180\)"),
        ({"scale": -0.1}, "scale: expected"),
        ({"shift": 8}, r"shift: expected a number in \[0, 8\) pixels"),
        ({"shift": True}, "shift: expected a number"),
    ],
)
def test_random_affine_rejects_bad_amounts(kwargs, match):
    with pytest.raises(ValueError, match=match):
        random_affine(torch.zeros(1, 1, 8, 8), **kwargs)


# -- schedule and optimizer --------------------------------------------------------------------


def test_cosine_schedule_warms_up_linearly_then_decays_to_zero():
    assert cosine_lr(1, 1e-3, 10, 110) == pytest.approx(1e-4)
    assert cosine_lr(10, 1e-3, 10, 110) == pytest.approx(1e-3)
    assert cosine_lr(60, 1e-3, 10, 110) == pytest.approx(5e-4)  # half way down the cosine
    assert cosine_lr(110, 1e-3, 10, 110) == pytest.approx(0.0, abs=1e-15)
    assert cosine_lr(500, 1e-3, 10, 110) == pytest.approx(0.0, abs=1e-15)
    assert cosine_lr(1, 1e-3, 0, 10) == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi / 10)))
    f = cosine_lambda(2e-3, 5, 50)
    assert [f(i) for i in range(50)] == [cosine_lr(i + 1, 2e-3, 5, 50) for i in range(50)]
    with pytest.raises(ValueError, match="total: expected an int greater than warmup=10"):
        cosine_lr(1, 1e-3, 10, 10)
    with pytest.raises(ValueError, match="step: expected >= 1"):
        cosine_lr(0, 1e-3, 1, 10)


def test_weight_decay_spares_biases_norms_tables_and_the_class_token(tmp_path):
    model = tiny_vit()
    config = TrainConfig(out=str(tmp_path), weight_decay=0.1, max_steps=1)
    optimizer = build_optimizer(model, config)
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert "patch_embed.proj.weight" in names and "head.weight" in names
    assert "encoder.layers.0.self_attn.in_proj.weight" in names
    assert not any(n.endswith("bias") or "norm" in n for n in names)
    assert "class_token" not in names and "position_embedding" not in names
    assert isinstance(build_optimizer(model, TrainConfig(out="x", max_steps=1)), torch.optim.Adam)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"schedule": "linear"}, r"schedule: expected one of \['transformer', 'cosine'\]"),
        ({"schedule": "cosine"}, "lr: the cosine schedule needs its peak rate"),
        ({"schedule": "cosine", "lr": 1e-3, "max_steps": None, "max_minutes": 1.0}, "decays to 0"),
        ({"weight_decay": -0.1}, "weight_decay: expected a finite number >= 0"),
        ({"batch_size": 0}, "batch_size: expected a positive int"),
        ({"augment": 1}, "augment: expected a bool"),
        ({"lr": 0.0}, "lr: expected a positive number"),
    ],
)
def test_train_config_checks_the_classifier_fields(fields, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        TrainConfig(out=str(tmp_path), **{"max_steps": 10, **fields})


def _vit_trainer(model, images, config) -> Trainer:
    return Trainer(
        model, images, None, config, progress=False, objective=ImageClassificationObjective
    )


def test_trainer_refuses_a_vit_without_batch_size_or_with_mismatched_images(tmp_path, splits):
    config = TrainConfig(out=str(tmp_path), max_steps=2)
    with pytest.raises(ValueError, match="batch_size: training a VisionTransformer needs"):
        _vit_trainer(tiny_vit(), splits["train"], config)
    config = TrainConfig(out=str(tmp_path), max_steps=2, batch_size=8)
    with pytest.raises(ValueError, match=r"the model takes \(1, 16, 16\)"):
        _vit_trainer(tiny_vit(image_size=16), splits["train"], config)
    with pytest.raises(ValueError, match="10 classes, but the model has num_classes=3"):
        _vit_trainer(tiny_vit(num_classes=3), splits["train"], config)
    with pytest.raises(TypeError, match="trains on LabelledImages"):
        _vit_trainer(tiny_vit(), [1, 2], config)
    with pytest.raises(ValueError, match="warmup: 4000 warm-up steps, but training lasts 3"):
        TrainConfig(out=str(tmp_path), max_steps=3, batch_size=8, schedule="cosine", lr=1e-3)
    # bounded by epochs, the last step is known only once the images are batched
    config = TrainConfig(out=str(tmp_path), max_epochs=1, batch_size=8, schedule="cosine", lr=1e-3)
    with pytest.raises(ValueError, match="warmup: 4000 warm-up steps, but training lasts"):
        _vit_trainer(tiny_vit(), splits["train"], config)


# -- training ----------------------------------------------------------------------------------


def _small_run(out, splits, resume: bool = False, on_evaluate=None) -> dict:
    config = TrainConfig(
        out=str(out),
        batch_size=32,
        schedule="cosine",
        lr=3e-3,
        warmup=3,
        weight_decay=0.05,
        augment=True,
        max_steps=8,
        eval_every=4,
        checkpoint_every=2,
        log_every=1,
        keep_checkpoints=2,
        average_last=1,
    )
    trainer = Trainer(
        tiny_vit(), splits["train"], splits["valid"], config, on_evaluate=on_evaluate,
        progress=False, objective=ImageClassificationObjective,
    )  # fmt: skip
    return trainer.train(resume=resume)


def _losses(out) -> list[tuple[str, str]]:
    with open(out / "metrics.csv", newline="", encoding="utf-8") as handle:
        return [(row["step"], row["loss"]) for row in csv.DictReader(handle)]


@pytest.mark.slow
def test_classifier_training_resumes_bit_for_bit_with_augmentation(tmp_path, splits):
    whole, part = tmp_path / "whole", tmp_path / "part"
    summary = _small_run(whole, splits)
    assert summary["steps"] == 8 and summary["stop_reason"] == "max_steps"

    def crash(step, model):
        raise KeyboardInterrupt  # killed after step 4's update, before its checkpoint

    with pytest.raises(KeyboardInterrupt):
        _small_run(part, splits, on_evaluate=crash)
    resumed = _small_run(part, splits, resume=True)
    assert resumed["resumed_from_step"] == 2
    assert _losses(part) == _losses(whole)
    with open(whole / "metrics.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[:7] == [
        "step", "epoch", "loss", "lr", "images_per_s", "val_loss", "val_accuracy"
    ]  # fmt: skip
    accuracies = [float(r["val_accuracy"]) for r in rows if r["val_accuracy"]]
    assert len(accuracies) == 2 and all(0.0 <= a <= 1.0 for a in accuracies)
    assert float(rows[-1]["lr"]) < float(rows[2]["lr"])  # the cosine is on its way down
    model = load_pretrained(whole / "model")
    assert isinstance(model, VisionTransformer)


def test_classify_counts_agree_with_the_predictions(splits):
    model = tiny_vit()
    with torch.no_grad():
        model.head.weight.normal_()  # a zero-initialised head would predict one class
    data = splits["valid"]
    result = classify(model, data.images, data.labels, classes=data.classes, batch_size=7)
    with torch.no_grad():
        predicted = model.eval()(data.images).argmax(-1)
    model.train()
    result = classify(model, data.images, data.labels, classes=data.classes, batch_size=7)
    assert result["correct"] == int((predicted == data.labels).sum())
    assert result["accuracy"] == pytest.approx(result["correct"] / 180)
    confusion = torch.tensor(result["confusion"])
    assert int(confusion.sum()) == 180 and int(confusion.trace()) == result["correct"]
    assert len(result["errors"]) == 180 - result["correct"]
    confidences = [e["confidence"] for e in result["errors"]]
    assert confidences == sorted(confidences, reverse=True)
    assert model.training is True  # its mode is restored
    with pytest.raises(ValueError, match="classes: 3 names for a model of num_classes=10"):
        classify(model, data.images, data.labels, classes="abc")
    with pytest.raises(TypeError, match=r"expected an attnlab\.VisionTransformer"):
        classify(torch.nn.Linear(2, 2), data.images, data.labels)


@pytest.mark.slow
def test_train_task_digits_smoke_beats_chance_by_a_wide_margin(tmp_path, capsys):
    """`attnlab train --task digits` end to end, shortened (about 20 s on 2 cores). Bound by
    epochs alone: the recipe's time budget is lifted, so a busy machine cannot cut it short."""
    out = tmp_path / "digits"
    argv = ["train", "--task", "digits", "--out", str(out), "--no-progress"]
    argv += ["--max-epochs", "12", "--warmup", "30", "--eval-every", "60"]
    argv += ["--set", "train.max_minutes=null"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "VisionTransformer, digits preset" in printed and "test (360 images)" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["training"]["stop_reason"] == "max_epochs"
    assert main(["evaluate", "--model", str(out / "model"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "digits" and report["images"] == 360
    assert report["accuracy"] == results["accuracy"]
    assert report["accuracy"] > 0.6, report  # chance is 0.1
    assert main(["evaluate", "--model", str(out / "model"), "--beam-size", "4"]) == 2
    err = capsys.readouterr().err
    assert "error: --beam-size: " in err and "accuracy" in err and err.count("\n") == 1
    job = json.loads((out / "model" / "job.json").read_text())
    assert job["train"]["schedule"] == "cosine" and job["model"]["preset"] == "digits"
    header = (out / "metrics.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    columns = Job.from_dict(job).validation_columns()
    assert header[header.index("val_loss") :] == list(columns) == ["val_loss", "val_accuracy"]
    # The pictures of the trained model: rollout over two test images, the position grid.
    pictures = tmp_path / "pictures"
    assert (
        main(
            [
                "viz",
                "rollout",
                "--model",
                str(out / "model"),
                "--index",
                "0,3",
                "--out",
                str(pictures),
            ]
        )
        == 0
    )
    assert (
        main(
            ["viz", "learned-pe", "--model", str(out / "model"), "--out", str(pictures / "pe.png")]
        )
        == 0
    )
    for name in ("rollout-test-0.png", "rollout-test-3.png", "pe.png"):
        assert (pictures / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    capsys.readouterr()
    assert main(["viz", "attention", "--model", str(out / "model")]) == 2
    assert "attnlab viz rollout" in capsys.readouterr().err
    assert main(["viz", "rollout", "--model", str(out / "model"), "--index", "360"]) == 2
    assert "--index: expected image indices in [0, 360)" in capsys.readouterr().err


def test_the_shipped_digits_are_scikit_learns():
    """attnlab/data/digits.npz holds the array of sklearn.datasets.load_digits, in its order."""
    datasets = pytest.importorskip("sklearn.datasets")
    from attnlab.data.images import load_digits_arrays

    images, labels = load_digits_arrays()
    reference = datasets.load_digits()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    assert np.array_equal(images.astype(np.int64), reference.images.astype(np.int64))
    assert np.array_equal(labels.astype(np.int64), reference.target)
