"""An imported Marian (opus-mt) model end to end: text in, text out, and everything downstream.

Each model is a random ``MarianMTModel`` built by transformers over SentencePiece tokenizers
trained in the test on a slice of Multi30K (tests/_marian.py), shared and separate
vocabularies, saved as an opus-mt directory is laid out, then imported with the real CLI
(``attnlab import``). Checked against transformers' own pipeline (``MarianTokenizer`` +
``generate`` + ``batch_decode``): the translations of text, greedy and beam 4 (the length
penalties coinciding at ``alpha = 0`` / ``length_penalty = 0``). Then: the Hugging Face export
gives back every tensor bit for bit, tokenizer files MarianTokenizer reads alike, and the same
translations; the CTranslate2 export translates identically; translate (also int8), evaluate,
viz attention and the explorer's API take the imported directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from _marian import write_marian_tokenizer_dir
from _paths import needs_multi30k
from attnlab.cli import main
from attnlab.data.tokenizer import load_tokenizers
from attnlab.decode.options import DecodingOptions
from attnlab.inference.translator import Translator, encode_sources

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

pytestmark = [
    pytest.mark.slow,  # transformers' generate and CTranslate2 on several models
    needs_multi30k,
]

MAX_NEW = 16
TEXTS = [
    "Two young men are playing soccer in a park.",
    "A dog runs.",
    "Eine Frau mit einem roten Hut liest ein Buch am Fenster.",
    "Zwölf Kinder, 3 Hunde und ein Ball!",
    "hello",
]


def _marian_dir(directory: Path, *, separate: bool, seed: int) -> Path:
    """An opus-mt-like directory: tokenizers, and a random MarianMTModel over their ids."""
    write_marian_tokenizer_dir(directory, separate_vocabs=separate)
    source = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    target_file = directory / ("target_vocab.json" if separate else "vocab.json")
    target = json.loads(target_file.read_text(encoding="utf-8"))
    pad = source["<pad>"]
    assert target["<pad>"] == pad  # one pad id, as Marian's config has one
    config = transformers.MarianConfig(
        vocab_size=len(source),
        decoder_vocab_size=len(target),
        share_encoder_decoder_embeddings=not separate,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=None,
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.5)
        model.final_logits_bias[0, 0] += 3.0  # EOS likely enough that outputs end early
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module", params=[False, True], ids=["shared", "separate"])
def imported(request, tmp_path_factory):
    """``(marian_dir, attnlab_dir)``: the opus-mt-like directory and its import by the CLI."""
    root = tmp_path_factory.mktemp("separate" if request.param else "shared")
    marian = _marian_dir(root / "marian", separate=request.param, seed=3)
    out = root / "attnlab"
    assert main(["import", str(marian), "--out", str(out)]) == 0
    return marian, out


def _hf_translate(directory: Path, texts: list[str], beams: int) -> list[str]:
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    model = transformers.MarianMTModel.from_pretrained(directory).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **batch,
            num_beams=beams,
            do_sample=False,
            length_penalty=0.0,
            early_stopping="never",
            max_new_tokens=MAX_NEW,
            bad_words_ids=[[model.config.pad_token_id]],
            forced_eos_token_id=None,
        )
    return tokenizer.batch_decode(out, skip_special_tokens=True)


@pytest.mark.parametrize("beams", [1, 4])
def test_text_translations_equal_transformers(imported, beams):
    marian, out = imported
    translator = Translator.load(
        out, decoding=DecodingOptions(beam_size=beams, alpha=0.0, max_new_tokens=MAX_NEW)
    )
    assert translator(TEXTS) == _hf_translate(marian, TEXTS, beams)


def test_import_keeps_the_tokenizers(imported):
    marian, out = imported
    src, tgt = load_tokenizers(out)
    reference = transformers.MarianTokenizer.from_pretrained(marian)
    for text in TEXTS:
        assert src.encode(text) == reference(text)["input_ids"]
        assert [*tgt.encode(text), tgt.eos_id] == reference(text_target=text)["input_ids"]


def test_huggingface_export_round_trip(imported, tmp_path):
    marian, out = imported
    back = tmp_path / "back"
    argv = ["export", "--model", str(out), "--to", "huggingface", "--out", str(back)]
    assert main(argv) == 0
    from safetensors.torch import load_file

    original = load_file(str(marian / "model.safetensors"))
    exported = load_file(str(back / "model.safetensors"))
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        assert torch.equal(exported[name], tensor), name
    for name in ("source.spm", "target.spm"):
        assert (back / name).read_bytes() == (marian / name).read_bytes()
    assert _hf_translate(back, TEXTS, 4) == _hf_translate(marian, TEXTS, 4)


def test_ctranslate2_export_translates_identically(imported, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    _, out = imported
    ct2_dir = tmp_path / "ct2"
    assert main(["export", "--model", str(out), "--to", "ctranslate2", "--out", str(ct2_dir)]) == 0
    src, tgt = load_tokenizers(out)
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    tokens = [[src.id_to_token(i) for i in src.encode(text)] for text in TEXTS]
    results = translator.translate_batch(
        tokens,
        beam_size=1,
        min_decoding_length=0,  # attnlab lets EOS come first (CTranslate2's default is 1)
        max_decoding_length=MAX_NEW,
        suppress_sequences=[[tgt.id_to_token(tgt.pad_id)]],
    )
    ours = Translator.load(out, decoding=DecodingOptions(beam_size=1, max_new_tokens=MAX_NEW))(
        TEXTS
    )
    vocab = {tgt.id_to_token(i): i for i in range(tgt.vocab_size)}
    theirs = [tgt.decode([vocab[t] for t in r.hypotheses[0]]) for r in results]
    assert theirs == ours
    # The README's recipe: plain SentencePiece on the exported files, Marian's framing.
    import sentencepiece

    readme = (ct2_dir / "README.md").read_text(encoding="utf-8")
    assert "source.spm" in readme and "min_decoding_length=0" in readme
    source = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / "source.spm"))
    known = {src.id_to_token(i) for i in range(src.vocab_size)}
    pieces = [[*source.encode(text, out_type=str), "</s>"] for text in TEXTS]
    # As MarianTokenizer: a piece Marian's vocabulary lacks is <unk> (CTranslate2 maps it so).
    assert [[p if p in known else "<unk>" for p in row] for row in pieces] == tokens


def test_cli_translate_evaluate_and_int8(imported, tmp_path, capsys):
    _, out = imported
    assert main(["translate", "--model", str(out), "--beam-size", "1", *TEXTS[:2]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == Translator.load(out, decoding=DecodingOptions(beam_size=1))(TEXTS[:2])
    argv = ["translate", "--model", str(out), "--quantize", "int8", TEXTS[0]]
    assert main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    reference.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    argv = ["evaluate", "--model", str(out), "--src", str(source), "--ref", str(reference)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sentences"] == len(TEXTS) and 0 <= result["chrf"] <= 100


def test_viz_attention_takes_text(imported, tmp_path):
    _, out = imported
    pictures = tmp_path / "attention"  # a directory: one picture per kind of attention
    argv = ["viz", "attention", "--model", str(out), "--src", TEXTS[1], "--out", str(pictures)]
    assert main(argv) == 0
    drawn = sorted(p.name for p in pictures.glob("*.png"))
    assert drawn and all((pictures / name).stat().st_size > 0 for name in drawn)


def test_the_explorer_opens_an_imported_model(imported):
    from fastapi.testclient import TestClient

    from attnlab.serve import create_app

    _, out = imported
    app = create_app(out, device="cpu")
    with TestClient(app, base_url="http://localhost") as client:
        info = client.get("/api/model").json()
        assert info["model_type"] == "transformer" and info["d_model"] == 32
        answer = client.post("/api/translate", json={"text": TEXTS[0], "beam_size": 1})
        assert answer.status_code == 200, answer.text
        expected = Translator.load(out, decoding=DecodingOptions(beam_size=1))(TEXTS[:1])[0]
        assert answer.json()["translation"] == expected
        attention = client.post("/api/attention", json={"text": TEXTS[1], "beam_size": 1})
        assert attention.status_code == 200, attention.text
        body = attention.json()
        assert body["source_tokens"][-1] == "</s>"  # Marian frames its sources with EOS
        assert body["target_tokens"][0] == "<pad>"  # and starts its decoder from pad
        positional = client.get("/api/positional").json()
        assert positional["kind"] == "sinusoidal" and positional["d_model"] == 32


def test_fine_tuning_an_imported_model(imported, tmp_path):
    """``init_from`` an imported model: targets framed as Marian's decoder reads them (from
    ``<pad>``, ending in ``</s>`` 0), a few steps that change the weights, and a result that
    goes back out to transformers."""
    from _marian import multi30k_lines
    from attnlab import load_pretrained
    from attnlab.jobs import Job, train_job

    _, out = imported
    task: dict[str, str] = {"name": "files"}
    for split, (start, count) in {"train": (0, 40), "valid": (40, 8), "test": (48, 8)}.items():
        for side, lang in (("src", "en"), ("tgt", "de")):
            lines = multi30k_lines(lang, start + count)[start:]
            path = tmp_path / f"{split}.{lang}"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            task[f"{split}_{side}"] = str(path)
    train = {"max_steps": 2, "warmup": 1, "eval_every": 2, "checkpoint_every": 2}
    job = Job.from_dict(
        {
            "task": task,
            "model": {"init_from": str(out)},
            "train": {**train, "keep_best": None, "log_every": 1},
            "eval": {"beam_size": 1, "bleu_sentences": 4, "max_tokens": 512},
        }
    )
    corpus = job.task.load()
    context = job.check(tmp_path / "setup")
    setup = job.task.setup(context, corpus, resume=False, rank=0, note=print)
    model, examples = setup.model, setup.train
    pad = model.config.pad_id
    assert all(e.tgt[0] == pad and e.tgt[-1] == 0 for e in examples)
    assert all(e.src[-1] == 0 for e in examples)  # the source tokenizer's own framing
    train_job(job, tmp_path / "run", progress=False)
    tuned = load_pretrained(tmp_path / "run" / "model")
    start = load_pretrained(out)
    assert any(not torch.equal(p, start.state_dict()[k]) for k, p in tuned.state_dict().items())
    back = tmp_path / "hf"
    argv = ["export", "--model", str(tmp_path / "run" / "model"), "--to", "huggingface"]
    assert main([*argv, "--out", str(back)]) == 0
    assert len(_hf_translate(back, TEXTS[:2], 1)) == 2


def test_empty_and_overlong_sources_keep_marians_frame(imported):
    """An empty line translates to an empty line (Marian's tokenizer frames it as ``[</s>]``);
    a source over the model's max_len is cut to max_len tokens that still end in ``</s>``."""
    _, out = imported
    translator = Translator.load(out, decoding=DecodingOptions(beam_size=1, max_new_tokens=4))
    long_text = " ".join(TEXTS * 20)
    reports: list = []
    encoded, order, _ = encode_sources(
        translator.src_tokenizer,
        [long_text, "", TEXTS[1]],
        translator.max_len,
        "cut",
        reports.append,
    )
    limit = translator.model.config.max_len
    assert len(encoded[0]) == limit and encoded[0][-1] == translator.src_tokenizer.eos_id
    assert encoded[0][:-1] == translator.src_tokenizer.encode(long_text)[: limit - 1]
    assert [r.index for r in reports] == [0] and order == [2, 0]
    assert translator.translate(["", TEXTS[1]], on_too_long=reports.append)[0] == ""
