"""The inference commands through the real CLI: evaluate on any parallel text, checkpoints and
runs as models, average, translate's decoding options and files, and load_translator; each
checked against the library on the same weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import attnlab
from attnlab.cli import main
from attnlab.decode.options import DecodingOptions
from attnlab.inference.scores import score
from attnlab.inference.translator import Translator

SOURCES = ["three hundred and twelve", "seven", "", "ninety-one", "four hundred and five"]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def run_dir(numbers_model_dir: Path) -> Path:
    return numbers_model_dir.parent


@pytest.fixture(scope="module")
def checkpoint(run_dir: Path) -> Path:
    found = sorted((run_dir / "checkpoints").glob("step-*"))
    assert found, "the session model has a checkpoint"
    return found[-1]


@pytest.fixture(scope="module")
def greedy(numbers_model_dir: Path) -> Translator:
    return Translator.load(numbers_model_dir, decoding=DecodingOptions(beam_size=1), device="cpu")


def test_evaluate_scores_any_parallel_text_as_the_library(
    numbers_model_dir, greedy, tmp_path, capsys
):
    sources = [s for s in SOURCES if s]
    references = ["dreihundertzwölf", "sieben", "einundneunzig", "vierhundertfünf"]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
    argv = ["evaluate", "--model", str(numbers_model_dir), "--src", str(tmp_path / "src.txt")]
    argv += ["--ref", str(tmp_path / "ref.txt"), "--beam-size", "1", "--json"]
    status, out, _ = _run(argv, capsys)
    assert status == 0
    result = json.loads(out)
    expected = score(greedy.translate(sources), references).to_dict()
    for key in ("bleu", "chrf", "exact_match", "sentences", "bleu_signature", "headline"):
        assert result[key] == expected[key], key
    # the text report names the file and the decoder
    status, out, _ = _run(argv[:-1], capsys)
    assert status == 0 and out.startswith("src.txt (4 sentences, greedy): ")


def test_evaluate_split_decodes_with_the_given_length_penalty(
    numbers_model_dir, monkeypatch, capsys
):
    """--alpha reaches the beam search of a split's evaluation (it used to apply to --src only,
    and a split was decoded with the job's alpha whatever was asked)."""
    asked: list[float] = []
    load = Translator.load.__func__  # type: ignore[attr-defined]

    def recording(cls, *args, **kwargs):
        asked.append(kwargs["decoding"].alpha)
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(Translator, "load", classmethod(recording))
    argv = ["evaluate", "--model", str(numbers_model_dir), "--split", "valid", "--limit", "6"]
    argv += ["--beam-size", "2", "--device", "cpu", "--json"]
    for flags, alpha in (([], 0.6), (["--alpha", "1.5"], 1.5), (["--alpha", "0"], 0.0)):
        status, out, _ = _run([*argv, *flags], capsys)
        assert status == 0, flags
        result = json.loads(out)
        assert asked[-1] == alpha and result["alpha"] == alpha and result["beam_size"] == 2
        pairs = attnlab.jobs.Job.from_dict(
            json.loads((numbers_model_dir / "job.json").read_text("utf-8"))
        ).task.load()["valid"][:6]
        expected = Translator.load(
            numbers_model_dir, decoding=DecodingOptions(beam_size=2, alpha=alpha), device="cpu"
        )
        hyps = expected.translate([s for s, _ in pairs])
        assert result["chrf"] == score(hyps, [t for _, t in pairs]).chrf, flags


def test_evaluate_files_refuses_mismatched_or_missing_files(numbers_model_dir, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("eins\n", encoding="utf-8")
    base = ["evaluate", "--model", str(numbers_model_dir), "--src", str(tmp_path / "src.txt")]
    status, _, err = _run([*base, "--ref", str(tmp_path / "ref.txt")], capsys)
    assert status == 2 and "--ref:" in err and "1 lines" in err and err.count("\n") == 1
    status, _, err = _run([*base, "--ref", str(tmp_path / "none.txt")], capsys)
    assert status == 2 and "--ref:" in err and "no such file" in err
    status, _, err = _run(base, capsys)
    assert status == 2 and "--ref: required with --src" in err


def test_a_checkpoint_and_a_run_translate_as_the_library(run_dir, checkpoint, capsys):
    texts = [s for s in SOURCES if s]
    expected = Translator.load(
        checkpoint, decoding=DecodingOptions(beam_size=1), device="cpu"
    ).translate(texts)
    for model in (checkpoint, run_dir):
        status, out, _ = _run(
            ["translate", "--model", str(model), "--beam-size", "1", *texts], capsys
        )
        assert status == 0
        assert out.splitlines() == expected


def test_evaluate_a_checkpoint_on_its_jobs_split(checkpoint, capsys):
    argv = ["evaluate", "--model", str(checkpoint), "--split", "valid", "--limit", "5"]
    status, out, _ = _run([*argv, "--beam-size", "1", "--json"], capsys)
    assert status == 0
    assert json.loads(out)["split"] == "valid" and json.loads(out)["sentences"] == 5


def test_a_missing_model_is_one_line_naming_the_flag(tmp_path, capsys):
    status, _, err = _run(["translate", "--model", str(tmp_path / "nope"), "hello"], capsys)
    assert status == 2
    assert err.startswith("attnlab translate: error: --model: ") and err.count("\n") == 1


def test_average_is_the_mean_of_the_weights(numbers_model_dir, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(numbers_model_dir, a)
    shutil.copytree(numbers_model_dir, b)
    weights = load_file(a / "model.safetensors")
    torch.manual_seed(0)
    changed = {
        k: v + torch.randn_like(v) if v.is_floating_point() else v for k, v in weights.items()
    }
    save_file(changed, b / "model.safetensors", metadata={"format": "pt"})
    status, out, _ = _run(["average", str(a), str(b), "--out", str(tmp_path / "avg")], capsys)
    assert status == 0 and "averaged 2 checkpoints" in out
    averaged = load_file(tmp_path / "avg" / "model.safetensors")
    for name, tensor in weights.items():
        mean = ((tensor.double() + changed[name].double()) / 2).to(tensor.dtype)
        torch.testing.assert_close(averaged[name], mean, rtol=0, atol=0)
    # the result is a model directory: the tokenizers came with it, and it translates
    # (one line per input: the noisy average may well translate "seven" to nothing)
    status, out, _ = _run(["translate", "--model", str(tmp_path / "avg"), "seven"], capsys)
    assert status == 0 and out.count("\n") == 1
    status, _, err = _run(["average", str(a), "--out", str(tmp_path / "avg")], capsys)
    assert status == 2 and "--out:" in err and "--overwrite" in err


def test_average_of_a_checkpoint_keeps_its_weights_and_finds_the_runs_tokenizer(
    checkpoint, tmp_path, capsys
):
    status, _, _ = _run(["average", str(checkpoint), "--out", str(tmp_path / "m")], capsys)
    assert status == 0
    assert {"config.json", "model.safetensors", "job.json"} <= {
        p.name for p in (tmp_path / "m").iterdir()
    }
    assert any(p.name.endswith("tokenizer.json") for p in (tmp_path / "m").iterdir())
    assert not (tmp_path / "m" / "optimizer.safetensors").exists()
    ours, theirs = (
        load_file(tmp_path / "m" / "model.safetensors"),
        load_file(checkpoint / "model.safetensors"),
    )
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_translate_options_match_the_library(numbers_model_dir, capsys):
    texts = [s for s in SOURCES if s]
    cases = [
        (["--alpha", "0"], {"alpha": 0.0}),
        (["--max-new-tokens", "2", "--beam-size", "1"], {"max_new_tokens": 2, "beam_size": 1}),
        (["--sample", "--seed", "3", "--top-k", "5", "--temperature", "0.7"],
         {"sample": True, "seed": 3, "top_k": 5, "temperature": 0.7}),
        (["--sample", "--seed", "3", "--top-p", "0.9"], {"sample": True, "seed": 3, "top_p": 0.9}),
    ]  # fmt: skip
    for flags, options in cases:
        decoding = DecodingOptions.for_model(numbers_model_dir, **options)  # as translate's
        expected = Translator.load(numbers_model_dir, device="cpu", decoding=decoding)(texts)
        argv = ["translate", "--model", str(numbers_model_dir), "--device", "cpu", *flags, *texts]
        status, out, _ = _run(argv, capsys)
        assert status == 0, flags
        assert out.splitlines() == expected, flags


def test_sampling_flags_need_sample(numbers_model_dir, capsys):
    argv = ["translate", "--model", str(numbers_model_dir), "--temperature", "0.5", "seven"]
    status, _, err = _run(argv, capsys)
    assert status == 2 and "--temperature: only with --sample" in err
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error
        main([*argv[:3], "--sample", "--top-p", "1.5", "seven"])
    assert (
        exit_.value.code == 2 and "--top-p: expected a number in (0, 1]" in capsys.readouterr().err
    )


def test_translate_a_file_in_chunks_keeps_the_order(numbers_model_dir, greedy, tmp_path, capsys):
    lines = [SOURCES[i % len(SOURCES)] + ("" if i % 3 else " ") for i in range(23)]
    lines[5] = ""
    source, target = tmp_path / "in.txt", tmp_path / "out" / "de.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target.parent.mkdir()
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "1"]
    argv += ["-i", str(source), "-o", str(target), "--batch-lines", "4"]
    status, out, _ = _run(argv, capsys)
    assert status == 0 and out == ""
    assert target.read_text(encoding="utf-8").splitlines() == greedy.translate(lines)
    assert [p.name for p in target.parent.iterdir()] == ["de.txt"]  # no temporary file left
    status, _, err = _run([*argv[:3], "-i", str(tmp_path / "none.txt")], capsys)
    assert status == 2 and "--input:" in err


def test_load_translator_is_one_call(numbers_model_dir, greedy):
    translate = attnlab.load_translator(
        numbers_model_dir, decoding=DecodingOptions(beam_size=1), device="cpu"
    )
    texts = [s for s in SOURCES if s]
    assert translate(texts) == greedy.translate(texts)
    assert translate(texts[0]) == greedy.translate(texts[:1])[0]


def test_translate_on_an_image_model_names_its_kind(tmp_path, capsys):
    from attnlab import VisionConfig, VisionTransformer

    config = VisionConfig(
        image_size=8, patch_size=4, in_channels=1, num_classes=3, d_model=16, num_heads=2,
        d_ff=32, num_layers=1,
    )  # fmt: skip
    VisionTransformer(config).save_pretrained(tmp_path / "vit")
    status, _, err = _run(["translate", "--model", str(tmp_path / "vit"), "seven"], capsys)
    assert status == 2 and "is a VisionTransformer" in err and err.count("\n") == 1


def test_n_best_rows_are_distinct_ranked_and_scored_by_the_model(numbers_model_dir):
    """beam_search(n_best=k): row 0 of each sentence is the plain search's answer, scores fall,
    hypotheses differ, and each log P is the teacher-forced log-probability of its tokens."""
    from attnlab.decode.search import beam_search, length_penalty

    translator = Translator.load(numbers_model_dir, device="cpu")
    model = translator.model.eval()
    sources = translator.src_tokenizer.encode_batch(["seven", "four hundred and five"])
    best = beam_search(model, sources, beam_size=4)
    found = beam_search(model, sources, beam_size=4, n_best=4)
    assert found.sequences.shape[0] == 8
    rows = found.tolist(keep_eos=True)
    assert [rows[0], rows[4]] == best.tolist(keep_eos=True)
    for i, src in enumerate(sources):
        group = list(range(4 * i, 4 * i + 4))
        scores = [float(found.scores[r]) for r in group]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(rows[r]) for r in group}) == 4
        for r in group:
            tgt = torch.tensor([[model.config.bos_id, *rows[r]]])
            with torch.no_grad():
                logits = model(torch.tensor([src]), tgt[:, :-1]).float().log_softmax(-1)
            log_p = logits[0].gather(1, tgt[0, 1:, None]).sum()
            torch.testing.assert_close(found.log_probs[r], log_p, rtol=1e-4, atol=1e-4)
            penalty = length_penalty(int(found.lengths[r]), 0.6)
            torch.testing.assert_close(found.scores[r], found.log_probs[r] / penalty)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, sources, beam_size=2, n_best=3)


def test_translate_n_best_prints_score_tab_text(numbers_model_dir, capsys):
    texts = ["seven", "", "ninety-one"]
    found = Translator.load(
        numbers_model_dir, device="cpu", decoding=DecodingOptions(beam_size=4, n_best=3)
    ).hypotheses(texts)
    expected = [[(h.score, h.text) for h in row] for row in found]
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "4", "--n-best", "3"]
    argv += texts
    status, out, _ = _run(argv, capsys)
    assert status == 0
    lines = out.splitlines()
    assert lines == [f"{s:.4f}\t{t}" for found in expected for s, t in found]
    assert len(expected[0]) == 3 and expected[1] == [(0.0, "")]
    status, _, err = _run([*argv[:5], "--n-best", "5", "seven"], capsys)
    assert status == 2 and "--n-best: expected at most --beam-size (4)" in err


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_viz_attention_draws_a_checkpoint(checkpoint, tmp_path, capsys):
    """viz's --model takes a checkpoint, through the resolver every --model goes through."""
    argv = ["viz", "attention", "--model", str(checkpoint), "--src-ids", "5 6 7"]
    argv += ["--out", str(tmp_path)]
    status, _, err = _run([*argv, "--max-new-tokens", "3"], capsys)
    assert status == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "cross.png",
        "decoder.png",
        "encoder.png",
    ]
    status, _, err = _run(
        ["viz", "attention", "--model", str(tmp_path / "none"), "--src-ids", "5"], capsys
    )
    assert status == 2 and "--model: " in err and err.count("\n") == 1
    out = tmp_path / "flag"
    argv = ["viz", "attention", "--model", str(checkpoint), "--src-ids", "5 6", "--out", str(out)]
    status, _, err = _run([*argv, "--max-new-tokens", "2"], capsys)
    assert status == 0 and err == "" and len(list(out.glob("*.png"))) == 3


def test_translate_a_file_shows_a_progress_bar_on_a_terminal(
    numbers_model_dir, tmp_path, monkeypatch, capsys
):
    source = tmp_path / "in.txt"
    source.write_text("seven\neight\n", encoding="utf-8")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "1", "-i", str(source)]
    status, out, err = _run(argv, capsys)
    assert status == 0 and len(out.splitlines()) == 2
    assert "translate: 100%" in err  # tqdm's bar, complete: every byte of the file read


def test_translate_decodes_as_the_models_recipe_chose_and_says_so(numbers_model_dir, capsys):
    """The numbers recipe chose greedy search on validation ([eval] beam_size = 1, alpha 0.6 in
    the model's job.json): translate uses it unless told, with one line naming where it came
    from; flags win; --n-best N raises a carried beam to N."""
    from attnlab.inference.translator import Translator as Plain

    texts = ["seven", "ninety-one", "three hundred and twelve"]
    loaded = Plain.load(numbers_model_dir, device="cpu")
    assert loaded.decoding == DecodingOptions(beam_size=1, alpha=0.6)  # the library carries it
    greedy = Plain(
        loaded.model,
        loaded.src_tokenizer,
        loaded.tgt_tokenizer,
        decoding=DecodingOptions(beam_size=1),
    )
    argv = ["translate", "--model", str(numbers_model_dir), "--device", "cpu", *texts]
    status, out, err = _run(argv, capsys)
    assert status == 0 and out.splitlines() == greedy.translate(texts)
    job = numbers_model_dir / "job.json"
    assert err == f"attnlab translate: beam 1, alpha 0.6: the model's recipe ({job} [eval])\n"
    status, out, err = _run([*argv, "--beam-size", "3", "--alpha", "1"], capsys)
    beam = Plain(
        loaded.model,
        loaded.src_tokenizer,
        loaded.tgt_tokenizer,
        decoding=DecodingOptions(beam_size=3, alpha=1.0),
    )
    assert status == 0 and err == "" and out.splitlines() == beam.translate(texts)
    status, out, err = _run([*argv, "--n-best", "2"], capsys)
    assert status == 0 and "beam 2, alpha 0.6" in err and "raised to 2 for --n-best" in err
    assert len(out.splitlines()) == 2 * len(texts)


def test_evaluate_reports_the_literatures_bleu_on_request(numbers_model_dir, tmp_path, capsys):
    """results.json carries the lowercased, Moses-tokenised BLEU beside the headline;
    ``evaluate --tokenized-bleu`` shows it, on the task's split and on files alike."""
    results = json.loads((numbers_model_dir.parent / "results.json").read_text())
    assert 0 <= results["bleu_tokenized"] <= 100
    assert "moses:de" in results["bleu_tokenized_signature"]
    argv = ["evaluate", "--model", str(numbers_model_dir), "--beam-size", "1", "--alpha", "0.6"]
    status, out, _ = _run([*argv, "--json"], capsys)
    assert status == 0 and "bleu_tokenized" not in json.loads(out)
    status, out, _ = _run([*argv, "--json", "--tokenized-bleu"], capsys)
    assert status == 0 and 0 <= json.loads(out)["bleu_tokenized"] <= 100
    status, out, _ = _run([*argv, "--tokenized-bleu", "--limit", "5"], capsys)
    assert status == 0 and "Moses-tokenised (the text-only literature's)" in out
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("seven\ntwelve\n", encoding="utf-8")
    ref.write_text("Sieben\nzwölf\n", encoding="utf-8")
    files = [*argv, "--src", str(src), "--ref", str(ref), "--json", "--tokenized-bleu"]
    status, out, _ = _run(files, capsys)
    assert status == 0 and "moses:de" in json.loads(out)["bleu_tokenized_signature"]


def _killed_at_call(n: int, calls: list[int]):
    """``(Translator.hypotheses, a stand-in)``: the stand-in is a Ctrl-C at the ``n``th call
    counted in ``calls`` (clear it to count again), the real method before."""
    real = Translator.hypotheses

    def hypotheses(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    return real, hypotheses


def test_translate_a_file_to_a_file_resumes_after_a_kill_to_the_same_bytes(
    numbers_model_dir, tmp_path, monkeypatch, capsys
):
    """-i with -o translates in chunks (attnlab.inference.corpus), each kept in OUT.work/ as it
    finishes: a run killed in the middle leaves no OUT, and the same command resumes after the
    chunks it finished, to the bytes of a run never killed; an input changed in between is
    translated anew (the work directory is keyed by it). Progress lines go to stderr on a
    terminal (elsewhere, as the bar, none)."""
    import attnlab.inference.corpus as corpus

    monkeypatch.setattr(corpus, "CHUNK_SIZE", 8)
    lines = [SOURCES[i % len(SOURCES)] + " " * (i % 3) for i in range(37)]
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "2", "--n-best", "2"]
    argv += ["--scores", "-i", str(source), "--batch-lines", "8"]

    def whole() -> str:  # a run never killed
        assert _run([*argv, "-o", str(tmp_path / "whole" / "out.txt")], capsys)[0] == 0
        return (tmp_path / "whole" / "out.txt").read_text(encoding="utf-8")

    (tmp_path / "whole").mkdir()
    expected = whole()
    streamed = _run(argv, capsys)[1]  # on stdout, no chunks: the same translations
    assert [line.split("\t")[1] for line in expected.splitlines()] == [
        line.split("\t")[1] for line in streamed.splitlines()
    ]
    calls: list[int] = []
    real, killed_in_chunk_3 = _killed_at_call(3, calls)

    monkeypatch.setattr(Translator, "hypotheses", killed_in_chunk_3)
    assert _run([*argv, "-o", str(out)], capsys)[0] == 130
    work = tmp_path / "out.txt.work"
    assert not out.exists() and len(list(work.glob("chunk-*.json"))) == 2
    monkeypatch.setattr(Translator, "hypotheses", real)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    status, printed, err = _run([*argv, "-o", str(out)], capsys)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    assert status == 0 and printed == ""
    assert "attnlab translate: resuming: 2 chunks of 8 sources decoded by an earlier run" in err
    assert f"preparing {out}: 37 / 37 lines (100.0%)" in err
    assert out.read_text(encoding="utf-8") == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt", "whole"]

    # Killed again, then the input changes: nothing of the earlier input's chunks is kept.
    calls.clear()
    monkeypatch.setattr(Translator, "hypotheses", killed_in_chunk_3)
    assert _run([*argv, "-o", str(out)], capsys)[0] == 130
    monkeypatch.setattr(Translator, "hypotheses", real)
    source.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    expected = whole()
    status, _, err = _run([*argv, "-o", str(out)], capsys)
    assert status == 0 and "resuming" not in err
    assert out.read_text(encoding="utf-8") == expected


def test_a_resumed_file_translation_still_counts_the_lines_an_earlier_run_refused(
    numbers_model_dir, tmp_path, monkeypatch, capsys
):
    """A line refused in a chunk that a killed run finished (here: more constraint phrases
    than the beam) is not decoded again when the run resumes; the resumed run says so again,
    and exits with the refusal status, as a run never killed does."""
    import attnlab.inference.corpus as corpus

    monkeypatch.setattr(corpus, "CHUNK_SIZE", 8)
    lines = ["one"] + [SOURCES[i % len(SOURCES)] or "six" for i in range(30)]
    source, phrases = tmp_path / "in.txt", tmp_path / "phrases.tsv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    phrases.write_text("eins\tzwei\tdrei\n" + "\n" * 30, encoding="utf-8")  # line 1: 3 > beam
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "2"]
    argv += ["-i", str(source), "--constraints", str(phrases), "--batch-lines", "8"]
    (tmp_path / "whole").mkdir()
    status, _, err = _run([*argv, "-o", str(tmp_path / "whole" / "out.txt")], capsys)
    assert status == 2 and err.count("--input") == 1 and "line 1: " in err
    expected = (tmp_path / "whole" / "out.txt").read_text(encoding="utf-8")
    assert expected.splitlines()[0] == ""

    calls: list[int] = []
    real, killed_in_chunk_3 = _killed_at_call(3, calls)

    out = tmp_path / "out.txt"
    monkeypatch.setattr(Translator, "hypotheses", killed_in_chunk_3)
    status, _, err = _run([*argv, "-o", str(out)], capsys)
    assert status == 130 and "line 1: " in err  # refused in chunk 0, which was written
    monkeypatch.setattr(Translator, "hypotheses", real)
    status, _, err = _run([*argv, "-o", str(out)], capsys)
    assert status == 2 and "resuming: 2 chunks" in err
    (said,) = [line for line in err.splitlines() if "line 1: " in line]
    assert said.endswith("(refused by an earlier run)")
    assert out.read_text(encoding="utf-8") == expected
    assert not (tmp_path / "out.txt.work").exists()


def test_translate_a_file_to_a_file_numbers_its_lines_as_streaming_does(
    numbers_model_dir, tmp_path, monkeypatch, capsys
):
    """The chunks are sorted by length, yet --json numbers each line by its place in the input
    and a line over --too-long is named by its own number, as on stdout."""
    import attnlab.inference.corpus as corpus

    monkeypatch.setattr(corpus, "CHUNK_SIZE", 4)
    lines = [SOURCES[i % len(SOURCES)] for i in range(11)]
    lines[6] = " ".join(["seven"] * 200)  # over the model's max_len
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(numbers_model_dir), "--beam-size", "1", "--json"]
    argv += ["-i", str(source), "--too-long", "refuse"]
    status, expected, streamed = _run(argv, capsys)
    assert status == 2 and f"--input {source} line 7: " in streamed
    status, _, err = _run([*argv, "-o", str(out)], capsys)
    assert status == 2 and f"--input {source} line 7: " in err
    found = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    streamed_rows = [json.loads(line) for line in expected.splitlines()]
    assert [row["line"] for row in found] == list(range(1, 12))
    # The same translations; a score may differ in its last bits (other batches, other sums).
    for row, other in zip(found, streamed_rows, strict=True):
        assert (row["line"], row["translation"]) == (other["line"], other["translation"])
        assert row.get("log_prob", 0.0) == pytest.approx(other.get("log_prob", 0.0), abs=1e-4)
