"""``attnlab generate`` and ``attnlab predict`` through the real CLI, on random-weight models
saved with save_pretrained (no training), checked against the library on the same weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab import TransformerConfig, TransformerLM, VisionConfig, VisionTransformer
from attnlab.cli import main
from attnlab.data.tokenizer import Tokenizer, save_tokenizers
from attnlab.decode.search import greedy_search, sample

TEXT = ["the cat sat on the mat", "a dog ran in the park", "the sun is warm today"] * 5


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("lm")
    tokenizer = Tokenizer.train(TEXT, vocab_size=300)
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, num_heads=2, d_ff=64,
        num_encoder_layers=0, num_decoder_layers=2, dropout=0.0,
        pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
    )  # fmt: skip
    model = TransformerLM(config)
    model.save_pretrained(directory)
    save_tokenizers(directory, tokenizer, None)
    return directory


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    config = VisionConfig(
        image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=16, num_heads=2,
        d_ff=32, num_layers=1,
    )  # fmt: skip
    VisionTransformer(config).save_pretrained(directory)
    return directory


def _library_text(lm_dir: Path, prompt: str, n: int, **sampling) -> str:
    from attnlab.inference.modeldir import load_with_tokenizers

    model, tokenizer, _ = load_with_tokenizers(lm_dir, device="cpu")
    ids = [[model.config.bos_id, *tokenizer.encode(prompt)]]
    if sampling:
        generator = torch.Generator().manual_seed(sampling.pop("seed"))
        out = sample(model, ids, max_new_tokens=n, generator=generator, **sampling)
    else:
        out = greedy_search(model, ids, max_new_tokens=n)
    return tokenizer.decode(out.tolist()[0])


def test_generate_greedy_is_the_librarys(lm_dir, capsys):
    assert main(["generate", "--model", str(lm_dir), "the cat", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == _library_text(lm_dir, "the cat", 12) + "\n"


def test_generate_sampling_is_seeded_and_the_librarys(lm_dir, capsys):
    argv = ["generate", "--model", str(lm_dir), "a dog", "--max-new-tokens", "10", "--sample"]
    argv += ["--seed", "7", "--top-k", "20"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    # one token per step from the same generator draws what one call of sample draws
    assert first == _library_text(lm_dir, "a dog", 10, seed=7, top_k=20) + "\n"


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_generate_streams_tokens_as_they_come(lm_dir):
    """The text arrives in pieces (one write per token), not as one block at the end."""
    code = (
        "import sys\nfrom attnlab.cli import main\n"
        "class Counting:\n    def __init__(self, s): self.s, self.writes = s, 0\n"
        "    def write(self, t): self.writes += bool(t); return self.s.write(t)\n"
        "    def flush(self): self.s.flush()\n"
        "sys.stdout = Counting(sys.stdout)\ncounter = sys.stdout\n"
        f"main(['generate', '--model', {str(lm_dir)!r}, 'the', '--max-new-tokens', '8'])\n"
        "print(counter.writes, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert int(done.stderr.strip().splitlines()[-1]) >= 3


@pytest.mark.parametrize("sampling", [[], ["--sample", "--seed", "3"]])
def test_generate_decodes_once_on_the_cache(lm_dir, capsys, monkeypatch, sampling):
    """One decoding call for the whole continuation (the prompt encoded once), whose tokens
    are the streamed text."""
    import attnlab.decode.search as generate

    calls = []
    for name in ("greedy_search", "sample"):
        real = getattr(generate, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(generate, name, counted)
    assert (
        main(["generate", "--model", str(lm_dir), "the", "--max-new-tokens", "9", *sampling]) == 0
    )
    assert calls == (["sample"] if sampling else ["greedy_search"])
    assert capsys.readouterr().out.strip() != ""


def test_predict_prints_the_top_classes_as_the_model(vit_dir, tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        pixels = rng.integers(0, 256, size=(8, 8), dtype=np.uint8)
        Image.fromarray(pixels, mode="L").save(tmp_path / f"{i}.png")
        paths.append(str(tmp_path / f"{i}.png"))
    assert main(["predict", "--model", str(vit_dir), *paths, "--top-classes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    model = VisionTransformer.from_pretrained(vit_dir).eval()
    for path, line in zip(paths, lines, strict=True):
        pixels = np.asarray(Image.open(path), dtype=np.float32) / 255.0
        with torch.no_grad():
            probs = model(torch.from_numpy(pixels)[None, None]).softmax(-1)[0]
        p, c = probs.topk(2)
        assert line == f"{path}\t{int(c[0])} {float(p[0]):.3f}, {int(c[1])} {float(p[1]):.3f}"


def test_predict_refuses_a_file_that_is_no_image(vit_dir, tmp_path, capsys):
    (tmp_path / "x.png").write_text("not an image")
    assert main(["predict", "--model", str(vit_dir), str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "IMAGE:" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("command", "fixture", "kind", "fits"),
    [
        (["translate", "hello"], "lm_dir", "TransformerLM", "attnlab generate"),
        (["generate", "hello"], "vit_dir", "VisionTransformer", "attnlab predict"),
        (["predict", "x.png"], "lm_dir", "TransformerLM", "attnlab generate"),
    ],
)
def test_the_wrong_kind_of_model_names_the_command_that_fits(
    command, fixture, kind, fits, request, capsys
):
    directory = request.getfixturevalue(fixture)
    argv = [command[0], "--model", str(directory), *command[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"is a {kind}" in err and f"use {fits}" in err and err.count("\n") == 1
