"""Loading a saved model trusts neither of its files (issue 16), and saving one replaces it as a
unit.

* ``config.json``: every size within ``LOAD_LIMITS``, so ``d_model = 10**9`` is one line naming
  the file and the field, not a 1.6 TB allocation; a config that is within the limits but does
  not describe the weights allocates nothing either (the model is built on the meta device).
* ``model.safetensors``: its header is checked before anything is read (structure, data all
  there, every name, dtype and shape, the total against ``count_parameters``); damage to any
  byte of it is a clear error or changes nothing; a float made NaN or infinite is refused.
* A model and its tokenizers are checked to belong together when loaded together.
* ``save_pretrained`` swaps in a whole new directory, carrying the other files of the old one
  over; a failed save (a full disk) leaves the old model and everything beside it.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
import safetensors.torch
import torch
from torch import nn

from attnlab import (
    Transformer,
    TransformerConfig,
    TransformerLM,
    VisionConfig,
    VisionTransformer,
    count_parameters,
    load_pretrained,
)
from attnlab.decode.options import DecodingOptions
from attnlab.models.saved import LOAD_LIMITS


def small(**overrides: object) -> TransformerConfig:
    options: dict[str, object] = {
        "vocab_size": 300,
        "d_model": 16,
        "num_heads": 2,
        "d_ff": 32,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "max_len": 32,
        "dropout": 0.0,
    }
    options.update(overrides)
    return TransformerConfig(**options)  # type: ignore[arg-type]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return Transformer(small()).save_pretrained(tmp_path / "model")


def esc(path: Path) -> str:
    return re.escape(str(path))


def edit_config(directory: Path, **changes: object) -> None:
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


# -- config.json: bounded sizes ----------------------------------------------------------------


def test_a_d_model_of_a_billion_is_one_line_naming_the_file_and_the_field(saved: Path) -> None:
    edit_config(saved, d_model=10**9)
    with pytest.raises(ValueError) as caught:
        load_pretrained(saved)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{saved / 'config.json'}: d_model: 1,000,000,000 is beyond ")
    assert "at most 65,536" in message


def test_the_cli_says_it_in_one_line_with_status_2(saved: Path, capsys) -> None:
    from attnlab.cli import main

    edit_config(saved, d_model=10**9)
    assert main(["translate", "--model", str(saved), "hello"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"attnlab translate: error: {saved / 'config.json'}: d_model: ")


TRANSFORMER_OVER = {
    "vocab_size": {},
    "tgt_vocab_size": {"share_embeddings": False},
    "type_vocab_size": {},
    "d_model": {},
    "d_ff": {},
    "num_encoder_layers": {},
    "num_decoder_layers": {},
    "max_len": {},
}
VISION_OVER = ["image_size", "num_classes", "in_channels", "num_layers"]


@pytest.mark.parametrize("field", sorted(TRANSFORMER_OVER))
def test_each_size_of_a_transformer_config_is_bounded(saved: Path, field: str) -> None:
    value = LOAD_LIMITS[field] + 2  # even: d_model stays divisible by num_heads
    edit_config(saved, **{field: value, **TRANSFORMER_OVER[field]})
    pattern = f"^{esc(saved / 'config.json')}: {field}: {value:,} is beyond what attnlab loads"
    with pytest.raises(ValueError, match=pattern):
        Transformer.from_pretrained(saved)


@pytest.mark.parametrize("field", VISION_OVER)
def test_each_size_of_a_vision_config_is_bounded(tmp_path: Path, field: str) -> None:
    VisionTransformer(VisionConfig.preset("digits")).save_pretrained(tmp_path)
    value = LOAD_LIMITS[field] + 2  # even: image_size stays divisible by patch_size 2
    edit_config(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=f"^{esc(tmp_path / 'config.json')}: {field}: "):
        load_pretrained(tmp_path)


# -- within the bounds but not the weights: nothing is allocated -------------------------------


def test_a_config_of_terabytes_within_the_bounds_allocates_nothing(saved: Path) -> None:
    """vocab_size 2**24 and d_model 2**16: an embedding of 4 TiB, had anything been allocated
    (the allocation would fail, or the machine swap). The weights file does not match it, and
    that is the error, found on the meta device."""
    edit_config(saved, vocab_size=1 << 24, d_model=1 << 16, d_ff=1 << 20)
    pattern = (
        rf"^{esc(saved / 'model.safetensors')}: src_embed\.token\.weight: shape \(300, 16\) "
        rf"does not match the config's \(16777216, 65536\)$"
    )
    with pytest.raises(ValueError, match=pattern):
        load_pretrained(saved)


def test_every_parameter_is_built_on_the_meta_device(saved: Path, monkeypatch) -> None:
    """No parameter is ever allocated and initialised to be overwritten: each is registered
    on the meta device and then replaced by the file's tensor (tied ones tied again)."""
    registered: list[nn.Parameter] = []
    register = nn.Module.register_parameter

    def spy(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            registered.append(param)
        register(self, name, param)

    monkeypatch.setattr(nn.Module, "register_parameter", spy)
    loaded = Transformer.from_pretrained(saved)
    monkeypatch.undo()
    final = {id(p) for p in loaded.parameters()}
    built = [p for p in registered if id(p) not in final]  # what construction made
    assert len({id(p) for p in built}) >= len(final)  # (nn.Linear makes one before a tie)
    assert all(p.is_meta for p in built)
    assert all(p.device.type == "cpu" for p in registered if id(p) in final)  # the file's
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    assert loaded.lm_head.weight is loaded.tgt_embed.token.weight is loaded.src_embed.token.weight
    torch.manual_seed(0)
    assert same_state(loaded, Transformer(small()))
    # The parameters are the model's own memory, not a view of the file: training them is fine.
    with torch.no_grad():
        loaded.lm_head.weight.add_(1.0)
    assert not same_state(loaded, Transformer.from_pretrained(saved))


def test_the_weights_are_counted_against_count_parameters(saved: Path, monkeypatch) -> None:
    real = count_parameters(small())
    monkeypatch.setattr(Transformer, "parameters_for", classmethod(lambda cls, c: real + 1))
    pattern = (
        f"^{esc(saved / 'model.safetensors')}: holds {real:,} weights, but "
        f"{esc(saved / 'config.json')} describes a model of {real + 1:,} parameters$"
    )
    with pytest.raises(ValueError, match=pattern):
        Transformer.from_pretrained(saved)


@pytest.mark.parametrize("positional", ["alibi", "sinusoidal", "rotary", "learned"])
def test_the_tables_a_model_computes_are_computed_on_load(tmp_path: Path, positional: str) -> None:
    """Buffers that are not saved (ALiBi's slopes, the sinusoidal caches) are rebuilt: the
    loaded model computes exactly what the saved one did. (A model loads in its weights'
    dtype throughout, as ``model.float()`` would make it: ALiBi's float64 slopes too.)"""
    torch.manual_seed(1)
    model = TransformerLM(small(positional=positional)).eval()
    loaded = TransformerLM.from_pretrained(model.save_pretrained(tmp_path))
    model.float()
    ids = torch.randint(4, 300, (2, 9))
    for (name, a), (_, b) in zip(model.named_buffers(), loaded.named_buffers(), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name
    with torch.no_grad():
        assert torch.equal(model(ids), loaded(ids))


def test_a_vision_models_fixed_table_is_computed_and_bounded(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = VisionTransformer(VisionConfig.preset("digits", positional="sinusoidal")).eval()
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    images = torch.rand(3, 1, 8, 8)
    assert torch.equal(loaded.position_embedding, model.position_embedding)
    with torch.no_grad():
        assert torch.equal(model(images), loaded(images))
    # Every weight still fits a 65,536-pixel image of 2x2 patches, but the fixed table would
    # hold 2**30 rows of 64: refused before it is computed.
    edit_config(tmp_path, image_size=1 << 16)
    with pytest.raises(ValueError, match=f"^{esc(tmp_path / 'config.json')}: the model would "):
        load_pretrained(tmp_path)


# -- model.safetensors: the header first -------------------------------------------------------


def _damage(raw: bytes, how: str) -> bytes:
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    body = raw[8 + length :]
    first = next(k for k in header if k != "__metadata__")

    def rebuild(edited: dict) -> bytes:
        text = json.dumps(edited).encode()
        return len(text).to_bytes(8, "little") + text + body

    if how == "empty":
        return b""
    if how == "5 bytes":
        return raw[:5]
    if how == "header cut":
        return raw[: 8 + length // 2]
    if how == "data cut":
        return raw[:-3]
    if how == "trailing bytes":
        return raw + b"\0" * 4
    if how == "huge header length":
        return (1 << 62).to_bytes(8, "little") + raw[8:]
    if how == "header not JSON":
        return raw[:8] + b"\xff" * length + body
    if how == "header a list":
        return rebuild([1, 2])  # type: ignore[arg-type]
    if how == "unknown dtype":
        return rebuild({**header, first: {**header[first], "dtype": "F7"}})
    if how == "shape not sizes":
        return rebuild({**header, first: {**header[first], "shape": [-1, 16]}})
    if how == "offsets off the shape":
        begin, end = header[first]["data_offsets"]
        return rebuild({**header, first: {**header[first], "data_offsets": [begin, end - 4]}})
    if how == "extra field":
        return rebuild({**header, first: {**header[first], "x": 1}})
    if how == "metadata not strings":
        return rebuild({**header, "__metadata__": {"format": 1}})
    if how == "overlapping data":
        entries = sorted(
            (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
        )
        second = entries[1]
        begin, end = header[second]["data_offsets"]
        shifted = {**header[second], "data_offsets": [begin - 4, end - 4]}
        return rebuild({**header, second: shifted})
    raise AssertionError(how)


DAMAGE = [
    "empty",
    "5 bytes",
    "header cut",
    "data cut",
    "trailing bytes",
    "huge header length",
    "header not JSON",
    "header a list",
    "unknown dtype",
    "shape not sizes",
    "offsets off the shape",
    "extra field",
    "metadata not strings",
    "overlapping data",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_header_is_one_clear_error(saved: Path, how: str) -> None:
    path = saved / "model.safetensors"
    path.write_bytes(_damage(path.read_bytes(), how))
    with pytest.raises(ValueError, match=f"^{esc(path)}: not a readable safetensors file: ") as e:
        load_pretrained(saved)
    assert "\n" not in str(e.value)


def test_every_flipped_bit_in_the_header_is_an_error_or_changes_nothing(saved: Path) -> None:
    """300 seeded single-bit flips over the length and the JSON header: each load is a
    ValueError naming the file, or (a flip in the metadata) the very same model."""
    path = saved / "model.safetensors"
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    original = load_pretrained(saved)
    rng = random.Random(16)
    outcomes = {"error": 0, "same": 0}
    for _ in range(300):
        where, bit = rng.randrange(8 + length), rng.randrange(8)
        flipped = bytearray(raw)
        flipped[where] ^= 1 << bit
        path.write_bytes(bytes(flipped))
        try:
            loaded = load_pretrained(saved)
        except ValueError as error:
            assert str(error).startswith(f"{path}: "), (where, bit, error)
            assert "\n" not in str(error)
            outcomes["error"] += 1
        else:
            assert same_state(loaded, original), (where, bit)
            outcomes["same"] += 1
    assert outcomes["error"] > 250, outcomes


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_weight_made_nan_or_infinite_is_refused(saved: Path, value: float) -> None:
    path = saved / "model.safetensors"
    state = safetensors.torch.load_file(path)
    state["decoder.layers.0.ff.linear1.weight"][3, 5] = value
    safetensors.torch.save_file(state, path, metadata={"format": "pt", "model_type": "transformer"})
    pattern = rf"^{esc(path)}: decoder\.layers\.0\.ff\.linear1\.weight: holds NaN or infinite"
    with pytest.raises(ValueError, match=pattern):
        load_pretrained(saved)


def test_flipped_bits_in_the_data_never_load_a_non_finite_weight(saved: Path) -> None:
    """A model directory has no checksum (a checkpoint has: tests/train/test_checkpoint.py), so a
    flipped bit in the data may load as another finite weight; but never as NaN or infinity:
    flipping the top exponent bit of a LayerNorm weight of 1.0 gives infinity, refused."""
    path = saved / "model.safetensors"
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    start = 8 + length
    header = json.loads(raw[8:start])
    begin = header["encoder.layers.0.norm1.weight"]["data_offsets"][0]
    flipped = bytearray(raw)
    flipped[start + begin + 3] ^= 0x40  # float32 1.0 is 3f800000: 7f800000 is +inf
    path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"norm1\.weight: holds NaN or infinite values"):
        load_pretrained(saved)
    rng = random.Random(7)
    for _ in range(60):
        flipped = bytearray(raw)
        flipped[rng.randrange(start, len(raw))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(flipped))
        try:
            loaded = load_pretrained(saved)
        except ValueError as error:
            assert "holds NaN or infinite values" in str(error)
        else:
            assert all(bool(torch.isfinite(p).all()) for p in loaded.parameters())


# -- save_pretrained: one unit, other files kept -----------------------------------------------


def _training_directory(directory: Path) -> dict[str, bytes]:
    """What `attnlab train` and a user leave beside a model: tokenizers, job.json, notes."""
    (directory / "notes").mkdir(parents=True)
    files = {
        "tokenizer.json": b'{"fake": true}\n',
        "job.json": b'{"task": "numbers"}\n',
        "notes/README.txt": b"my notes\n",
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
    (directory / "latest-job").symlink_to("job.json")
    return files


def test_saving_over_a_model_directory_keeps_every_other_file(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    torch.manual_seed(0)
    Transformer(small()).save_pretrained(directory)
    files = _training_directory(directory)
    inode = (directory / "job.json").stat().st_ino
    torch.manual_seed(1)
    second = Transformer(small())
    assert second.save_pretrained(directory) == directory
    for name, content in files.items():
        assert (directory / name).read_bytes() == content, name
    assert (directory / "job.json").stat().st_ino == inode  # hard-linked, not copied
    assert os.readlink(directory / "latest-job") == "job.json"
    assert same_state(Transformer.from_pretrained(directory), second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left


def test_a_full_disk_while_saving_leaves_the_old_model_and_its_files(
    tmp_path: Path, monkeypatch
) -> None:
    """The disk refuses the weights as they are written (attnlab._tensorfile's writer): the
    OSError of its errno, naming the model's file; nothing of the old directory changed."""
    import attnlab._tensorfile

    directory = tmp_path / "model"
    Transformer(small()).save_pretrained(directory)
    _training_directory(directory)
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    class FullDisk:  # a file that takes no byte
        def __init__(self, path: object, mode: str) -> None:
            Path(str(path)).touch()

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def write(self, data: bytes) -> int:
            raise OSError(28, os.strerror(28))

    monkeypatch.setattr(attnlab._tensorfile, "open", FullDisk, raising=False)
    with pytest.raises(OSError) as caught:
        Transformer(small(d_model=32)).save_pretrained(directory)
    assert caught.value.errno == 28
    assert str(caught.value) == (
        f"{directory / 'model.safetensors'}: not written (No space left on device); the "
        f"previous model, if any, is intact"
    )
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_two_files_are_replaced_together(tmp_path: Path, monkeypatch) -> None:
    """A failure after the new weights were written (the config refused) leaves the old
    weights too: never a new weights file beside an old config."""
    directory = tmp_path / "model"
    Transformer(small()).save_pretrained(directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    write_text = Path.write_text

    def refuse_config(self: Path, *args: object, **kwargs: object) -> int:
        if self.parent.name.startswith(".model.") and self.name.startswith(".config.json"):
            raise OSError(28, "No space left on device")
        return write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", refuse_config)
    with pytest.raises(OSError, match=f"^{esc(directory / 'config.json')}: not written"):
        Transformer(small(d_model=32)).save_pretrained(directory)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before


def test_saving_into_the_working_directory_or_through_a_link(tmp_path: Path, monkeypatch) -> None:
    """The working directory cannot be swapped away under the process: its two files are
    replaced one by one there. A link to a directory is followed: the link stays a link."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "keep.txt").write_text("kept")
    monkeypatch.chdir(here)
    model = Transformer(small())
    model.save_pretrained(".")
    assert sorted(os.listdir(here)) == ["config.json", "keep.txt", "model.safetensors"]
    assert same_state(Transformer.from_pretrained(here), model)

    link = tmp_path / "link"
    link.symlink_to(here)
    torch.manual_seed(5)
    other = Transformer(small())
    other.save_pretrained(link)
    assert link.is_symlink() and (here / "keep.txt").read_text() == "kept"
    assert same_state(Transformer.from_pretrained(here), other)


def test_saving_onto_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.write_text("not a directory")
    with pytest.raises(NotADirectoryError, match=f"^{esc(target)}: exists and is not a dir"):
        Transformer(small()).save_pretrained(target)
    assert target.read_text() == "not a directory"


# -- a model and its tokenizers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from attnlab.data.tokenizer import Tokenizer

    words = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
    ]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(400)]
    return Tokenizer.train(texts, vocab_size=320)


def _translation_directory(path: Path, tokenizer, **config: object) -> Path:
    from attnlab.data.tokenizer import save_tokenizers

    Transformer(small(**config)).save_pretrained(path)
    save_tokenizers(path, tokenizer)
    return path


def test_a_tokenizer_beyond_the_model_vocabulary_is_refused_at_load(
    tmp_path: Path, tokenizer, capsys
) -> None:
    from attnlab.cli import main
    from attnlab.inference.translator import Translator

    size = tokenizer.vocab_size
    fits = _translation_directory(tmp_path / "fits", tokenizer, vocab_size=size)
    assert Translator.load(fits, device="cpu", decoding=DecodingOptions(beam_size=1)).translate(
        ["one two"]
    )

    small_vocab = _translation_directory(tmp_path / "small", tokenizer, vocab_size=size - 20)
    pattern = (
        f"^{esc(small_vocab / 'tokenizer.json')}: the tokenizer has {size:,} tokens, more than "
        f"the model's source vocabulary \\({esc(small_vocab / 'config.json')}: "
        f"vocab_size={size - 20:,}\\)"
    )
    with pytest.raises(ValueError, match=pattern):
        Translator.load(small_vocab, device="cpu")
    assert main(["translate", "--model", str(small_vocab), "one two"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokenizer.json: the tokenizer has" in err


def test_a_target_tokenizer_beyond_the_target_vocabulary_names_its_file(
    tmp_path: Path, tokenizer
) -> None:
    from attnlab.data.tokenizer import save_tokenizers
    from attnlab.inference.translator import Translator

    size = tokenizer.vocab_size
    path = tmp_path / "model"
    config = small(vocab_size=size, tgt_vocab_size=size - 1, share_embeddings=False)
    Transformer(config).save_pretrained(path)
    save_tokenizers(path, tokenizer, _copy(tokenizer))
    pattern = (
        f"^{esc(path / 'tgt_tokenizer.json')}: the tokenizer has {size:,} tokens, more than the "
        f"model's target vocabulary \\({esc(path / 'config.json')}: tgt_vocab_size={size - 1:,}"
    )
    with pytest.raises(ValueError, match=pattern):
        Translator.load(path, device="cpu")


def test_other_special_ids_are_refused_at_load(tmp_path: Path, tokenizer) -> None:
    from attnlab.inference.translator import Translator

    path = _translation_directory(tmp_path / "m", tokenizer, vocab_size=tokenizer.vocab_size)
    edit_config(path, eos_id=3)
    pattern = f"^{esc(path / 'config.json')}: eos_id=3, but {esc(path / 'tokenizer.json')} uses 2"
    with pytest.raises(ValueError, match=pattern):
        Translator.load(path, device="cpu")


def _copy(tokenizer):
    from attnlab.data.tokenizer import Tokenizer

    return Tokenizer(type(tokenizer.backend).from_str(tokenizer.backend.to_str()))
