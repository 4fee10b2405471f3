"""Packaging: the optional extras (serve, vision, tensorboard) and the one line a command
prints when its extra is missing; the digits data shipped inside the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from attnlab import VisionConfig, VisionTransformer
from attnlab.cli import main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_heavy_dependencies_are_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(project["dependencies"]).lower()
    for name in ("fastapi", "uvicorn", "scikit-learn", "pillow", "tensorboard"):
        assert name not in core, name
    extras = project["optional-dependencies"]
    assert any(d.startswith("fastapi") for d in extras["serve"])
    assert any(d.startswith("uvicorn") for d in extras["serve"])
    assert any(d.lower().startswith("pillow") for d in extras["vision"])
    assert any(d.startswith("tensorboard") for d in extras["tensorboard"])
    assert "attnlab[serve,vision]" in extras["test"]  # `make test` installs what tests run


def test_the_digits_ship_inside_the_package():
    from importlib.resources import files

    from attnlab.data.images import load_digits_arrays

    data = files("attnlab.data")
    assert data.joinpath("digits.npz").is_file() and data.joinpath("DIGITS.txt").is_file()
    images, labels = load_digits_arrays()
    assert images.shape == (1797, 8, 8) and int(images.max()) == 16
    assert sorted(set(labels.tolist())) == list(range(10))


def _forget(monkeypatch, *prefixes: str) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in prefixes or name.startswith("attnlab.serve"):
            monkeypatch.delitem(sys.modules, name)


def test_serve_without_its_extra_is_one_line_naming_the_install(monkeypatch, tmp_path, capsys):
    VisionTransformer(
        VisionConfig(image_size=8, patch_size=4, in_channels=1, num_classes=2, d_model=8,
                     num_heads=2, d_ff=16, num_layers=1)
    ).save_pretrained(tmp_path / "m")  # fmt: skip
    _forget(monkeypatch, "fastapi", "uvicorn", "starlette")
    monkeypatch.setitem(sys.modules, "fastapi", None)  # importing it fails: not installed
    assert main(["serve", "--model", str(tmp_path / "m"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err == "attnlab serve: error: fastapi is not installed: pip install 'attnlab[serve]'\n"


def test_predict_without_pillow_names_the_vision_extra(monkeypatch, tmp_path, capsys):
    torch.manual_seed(0)
    VisionTransformer(
        VisionConfig(image_size=8, patch_size=4, in_channels=1, num_classes=2, d_model=8,
                     num_heads=2, d_ff=16, num_layers=1)
    ).save_pretrained(tmp_path / "m")  # fmt: skip
    (tmp_path / "x.png").write_bytes(b"\x89PNG")
    _forget(monkeypatch, "PIL")
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert main(["predict", "--model", str(tmp_path / "m"), str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err == "attnlab predict: error: PIL is not installed: pip install 'attnlab[vision]'\n"


@pytest.mark.parametrize("module", ["fastapi", "uvicorn", "PIL", "tensorboard"])
def test_every_extra_module_is_named(module):
    from attnlab.cli import EXTRAS, describe_error

    status, line = describe_error(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert status == 1 and line.endswith(f"pip install 'attnlab[{EXTRAS[module]}]'")
