"""Smoke runs of the benchmark scripts (`make bench` runs them in full).

These check that the scripts run and report sane, self-consistent numbers; they do not check
speed, which only the full benchmark on a quiet machine can say.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _paths import needs_multi30k

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # each runs a benchmark script (minutes on 2 busy cores)


def run_quick(script: str, tmp_path: Path) -> tuple[dict, str]:
    """Run ``benchmarks/<script>.py --quick``; its JSON report and what it printed."""
    out = tmp_path / f"{script}.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text()), done.stdout


def test_attention_benchmark_quick_run(tmp_path: Path) -> None:
    report, printed = run_quick("attention", tmp_path)
    assert report["quick"] is True
    assert report["gemm"]["peak_gflops"] > 0
    keys = {m["key"] for m in report["measurements"]}
    assert {"train_B8_T256", "train_B2_T1024", "eval_B8_T256", "eval_B2_T1024"} <= keys
    for measurement in report["measurements"]:
        assert measurement["attnlab"] > 0 and measurement["baseline"] > 0, measurement["key"]
        ratio = measurement["attnlab"] / measurement["baseline"]
        assert abs(ratio - measurement["ratio"]) < 1e-9, measurement["key"]
    # Same weights on both sides: the training step's input gradients agree.
    train = next(m for m in report["measurements"] if m["key"] == "train_B8_T256")
    assert train["details"]["max_abs_diff_input_grad"] < 1e-4
    # The flash path never materialises the n x n scores: far below the naive peak.
    memory = next(m for m in report["measurements"] if m["key"].startswith("mem"))
    assert memory["ratio"] < 0.1
    assert "ratio" in printed


def _glibc() -> bool:
    import ctypes

    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


def test_model_benchmark_quick_run(tmp_path: Path) -> None:
    report, printed = run_quick("model", tmp_path)
    assert report["quick"] is True
    rows = {m["key"]: m for m in report["measurements"]}
    assert set(rows) == {
        "train",
        "train_padded",
        "train_attnlab_torch_loss",
        "mfu_attnlab",
        "mfu_torch",
    }
    # The fused loss against torch's, on the same model: both steps ran.
    fused = rows["train_attnlab_torch_loss"]
    assert fused["attnlab"] > 0 and fused["baseline"] > 0
    for key in ("train", "train_padded"):
        row = rows[key]
        assert row["attnlab"] > 0 and row["baseline"] > 0, key
        assert abs(row["attnlab"] / row["baseline"] - row["ratio"]) < 1e-9, key
        # The two models hold the same weights and compute the same loss (dropout off).
        assert row["details"]["eval_loss_abs_diff"] < 1e-4, key
    assert rows["train"]["details"]["pad_fraction"] == 0.0
    # As attnlab train runs on glibc: freed memory kept for the next step (the JSON says so).
    assert report["allocator"].startswith("freed memory kept") or not _glibc()
    assert 0.1 < rows["train_padded"]["details"]["pad_fraction"] < 0.3
    # The analytic FLOPs of a step, recomputed here from the closed form by component.
    flops = rows["mfu_attnlab"]["details"]["step_flops"]
    d, f, n, layers, vocab, batch = 256, 1024, 64, 3, 8000, 32
    encoder = layers * (4 * n * d * d + 2 * n * d * f + 2 * n * n * d)
    decoder = layers * (8 * n * d * d + 4 * n * n * d + 2 * n * d * f)
    assert flops["encoder"] == 2 * batch * encoder
    assert flops["decoder"] == 2 * batch * decoder
    assert flops["logits"] == 2 * batch * n * d * vocab
    assert flops["training_step"] == 3 * (flops["encoder"] + flops["decoder"] + flops["logits"])
    assert "ratio" in printed


def test_decode_benchmark_quick_run(tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    report, printed = run_quick("decode", tmp_path)
    assert report["quick"] is True
    rows = {m["key"]: m for m in report["measurements"]}
    cases = ("greedy_B1", "greedy_B4", "beam4_B4")
    assert set(rows) == {f"{c}_{tag}" for c in cases for tag in ("fp32", "int8")}
    for key, row in rows.items():
        assert row["attnlab"] > 0 and row["baseline"] > 0, key
        assert abs(row["attnlab"] / row["baseline"] - row["ratio"]) < 1e-9, key
        assert row["baseline_name"].startswith("CTranslate2"), key
    checks = report["output_checks"]
    # The same weights in three engines: greedy outputs are identical row for row.
    for case in ("greedy_B1", "greedy_B4"):
        rows_in = checks[case]["rows"]
        assert checks[case]["identical_rows_attnlab_vs_ct2"] == rows_in, case
        assert checks[case]["identical_rows_attnlab_vs_torch"] == rows_in, case
        assert checks[case]["identical_rows_attnlab_vs_attnlab-reference"] == rows_in, case
    # Both weight types profiled for every case; a step's time holds the time outside any op.
    assert set(report["profiles"]) == set(rows)
    for case, profile in report["profiles"].items():
        assert abs(sum(profile["shares"].values()) - 1.0) < 1e-6, case
        assert 0 < profile["python_calls_per_step"] < profile["aten_calls_per_step"], case
        assert 0 <= profile["outside_ops_us_per_step"] <= profile["profiled_wall_us_per_step"]
        linear = "quantized::linear_dynamic" if case.endswith("int8") else "aten::addmm"
        assert profile["linear_calls"][linear]["calls_per_step"] >= 1, case
        assert "outside any op" in rows[case]["details"]["bound"], case
    assert report["markdown"].startswith("| row | threads |")
    assert "attnlab / CT2 fp32" in printed


def test_int8_linear_benchmark_quick_run(tmp_path: Path) -> None:
    report, printed = run_quick("int8_linear", tmp_path)
    assert report["quick"] is True
    rows = {m["key"]: m for m in report["measurements"]}
    kinds = ("dynamic-int8", "weight-only-int8")
    assert set(rows) == {f"{s}_R1_{k}" for s in ("qkv", "attention_out") for k in kinds}
    for key, row in rows.items():
        assert row["baseline_name"] == "fp32", key
        assert abs(row["attnlab"] / row["baseline"] - row["ratio"]) < 1e-9, key
        # Checked before timing: weight-only is the dequantized product to float rounding.
        errors = row["details"]["relative_errors"]
        assert errors["weight-only-int8"] < 1e-5 < errors["dynamic-int8"] < 0.05, key
    assert "weight-only-int8" in printed


def test_static_decode_benchmark_quick_run(tmp_path: Path) -> None:
    """The shape-stable step (issue 28, section 1): compiled once per batch size, never per
    position, and equal to the fast step on the timed model and on other shapes."""
    report, printed = run_quick("static_decode", tmp_path)
    assert report["quick"] is True
    # Two batch sizes, 6 positions each, counted by dynamo: one graph per batch size.
    assert report["compilations"] == 2
    kinds = ("static",) if report["why_not_compile"] else ("static", "inductor")
    checks = {**report["checks"], **report["shape_checks"]}
    assert set(report["checks"]) == {f"B{b}_{kind}" for b in (1, 2) for kind in kinds}
    assert len(report["shape_checks"]) == 2 * len(kinds)  # 2 shapes
    for name, check in checks.items():
        assert check["same_tokens"], name
        assert check["max_logit_diff"] <= 1e-5, name
    rows = {m["key"]: m for m in report["measurements"]}
    assert set(rows) == {f"greedy_B{b}_{kind}" for b in (1, 2) for kind in kinds}
    for key, row in rows.items():
        assert abs(row["attnlab"] / row["baseline"] - row["ratio"]) < 1e-9, key
    assert set(report["compile_s"]) == {f"B{b}_inductor" for b in (1, 2) if "inductor" in kinds}
    assert all(seconds > 0 for seconds in report["compile_s"].values())
    assert "compilations over 2 batch sizes: 2" in printed


def test_constrained_benchmark_small_run(numbers_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/constrained.py on the session's numbers model: references that add a word the
    model never says ("Katzen"), so every sentence gets constraints; all are met, and the speed
    rows are self-consistent."""
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    numbers = ["twelve", "forty-two", "seven", "three hundred and one", "ninety", "eight"]
    src.write_text("\n".join(numbers) + "\n", encoding="utf-8")
    ref.write_text("\n".join(["zwölf Katzen"] * len(numbers)) + "\n", encoding="utf-8")
    out = tmp_path / "constrained.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "constrained.py"), "--model",
         str(numbers_model_dir), "--src", str(src), "--ref", str(ref), "--speed-sentences", "4",
         "--beam-size", "4",
         "--reps", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["constrained_sentences"] == len(numbers)
    assert report["met"] == report["constraints"] >= len(numbers)
    assert report["refused"] == []
    for key in ("unconstrained", "constrained", "subset_unconstrained", "subset_constrained"):
        assert 0 <= report["quality"][key]["chrf"] <= 100
    assert {(r["batch"], r["threads"]) for r in report["speed"]} == {(1, 1), (1, 2), (32, 1),
                                                                     (32, 2)}  # fmt: skip
    for row in report["speed"]:
        assert row["plain_tok_s"] > 0 and row["constrained_tok_s"] > 0
        ratio = row["constrained_tok_s"] / row["plain_tok_s"]
        assert abs(ratio - row["ratio"]) < 1e-9
    assert "constraints met" in done.stdout


def test_distill_processes_quick_run(numbers_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/distill_processes.py --quick with the session's numbers model as the teacher:
    1,000 sources decoded by 1 process and by 2 under torchrun give the same corpus, and the
    record holds each run's wall and summed decoding times and their ratio (not its speed)."""
    out = tmp_path / "distill_processes.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "distill_processes.py"), "--quick",
         "--teacher", str(numbers_model_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["same_corpus"] is True
    one, two = report["one_process"], report["processes"]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert one["pairs"] == two["pairs"] == 1000
    for run in (one, two):
        assert 0 < run["decode_wall_seconds"] <= run["command_seconds"]
    assert report["wall_ratio"] == round(two["decode_wall_seconds"] / one["decode_wall_seconds"], 3)
    assert report["goal"]["passed"] == (report["wall_ratio"] <= 0.62)
    assert "the same corpus byte for byte: True" in done.stdout


@pytest.mark.slow
@needs_multi30k
def test_data_scale_benchmark_smoke_run(tmp_path: Path) -> None:
    """benchmarks/data_scale.py on 2,000 pairs: it builds the corpus, prepares it, reads it
    and trains on it (a cold and a ready start, then the first run resumed), and reports the
    goals it could measure."""
    out = tmp_path / "data_scale.json"
    argv = ["--sizes", "0.002", "--skip-today", "--workers", "1", "--work", str(tmp_path / "w")]
    argv += ["--vocab-size", "8000", "--preset", "tiny"]  # small and quick (defaults: the docs')
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "data_scale.py"), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    size = json.loads(out.read_text())["sizes"]["0.002M"]
    assert size["prepare"]["pairs"] > 0 and size["loader"]["pairs_per_s"] > 0
    assert [run["rc"] for run in size["training"].values()] == [0, 0, 0]  # cold, ready, resumed
    for run in size["training"].values():  # the step began, then its line: both seen, in order
        assert 0 < run["start_s"] <= run["first_step_s"]
    assert any("shards reused" in line for line in size["training"]["ready"]["data_lines"])
    assert "goals:" in done.stdout
    report = json.loads(out.read_text())  # one memory measure, named; what the runs were
    assert report["memory_measure"]["name"] == "pss_tree"
    assert (report["vocab_size"], report["preset"]) == (8000, "tiny")
    assert report["kept_pairs"]["0.002M"] == size["prepare"]["pairs"] == size["kept_pairs"]
    for run in (size["prepare"], size["loader"], *size["training"].values()):
        assert run["peak_pss_mib"] > 0 and run["memory_measure"].startswith("pss_tree")
    assert size["training"]["cold"]["kept_pairs"] == size["kept_pairs"]


@pytest.mark.slow
def test_distill_benchmark_quick_run(tmp_path: Path, numbers_model_dir: Path) -> None:
    """benchmarks/distill.py end to end on the numbers model, as two teachers (the same model
    twice) and a student: every system scored and timed, CTranslate2 greedy equal to attnlab
    greedy on the same weights, the ensemble of a model twice scoring as the model, the goals
    judged, the picture drawn."""
    import gzip
    import shutil

    out, png = tmp_path / "distill.json", tmp_path / "distill.png"
    d = str(numbers_model_dir)
    # The second teacher: the same model in a directory of its own (a seed of its own to the
    # report, with the same translations).
    twin = tmp_path / "seed1" / "model"
    shutil.copytree(numbers_model_dir, twin)
    # Two blind sets, sources only: one gzipped (with an empty line), one plain; a file of
    # another language is not one.
    sets = tmp_path / "blind-sets"
    sets.mkdir()
    flickr = ["three hundred and five", "", "seventy-two", "one thousand and one"]
    with gzip.open(sets / "test_a.en.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(flickr) + "\n")
    (sets / "test_b.en").write_text("nine\neleven\n", encoding="utf-8")
    (sets / "test_b.de").write_text("neun\n", encoding="utf-8")
    blind_out = tmp_path / "blind"
    # The blind sets are named on the command line only: where CI points
    # $ATTNLAB_MULTI30K_BLIND at Multi30K's, no run here translates them into the repository.
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_MULTI30K_BLIND"}
    on_file = ROOT / "benchmarks" / "results" / "blind"
    before = sorted(on_file.iterdir()) if on_file.is_dir() else []
    argv = [sys.executable, str(ROOT / "benchmarks" / "distill.py"), "--quick", "--out", str(out)]
    argv += ["--picture", str(png), "--teachers", d, str(twin), "--students", d]
    argv += ["--blind", str(sets), "--blind-out", str(blind_out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    names = [s["name"] for s in report["systems"]]
    assert names[:2] == ["recipe model", "ensemble of 2"] and len(names) == 3
    quality = report["quality"]
    for split in ("valid/float32", "test/float32", "test/int8"):
        assert quality["ensemble of 2"][split]["bleu"] == quality["recipe model"][split]["bleu"]
    assert quality["recipe model"]["test/float32"]["beam_size"] == 1  # the numbers recipe
    ct2, ours = report["ct2_quality"]["recipe model"]["test/float32"], quality["recipe model"]
    assert ct2["chrf"] == pytest.approx(ours["test/float32"]["chrf"]) and ct2["chrf"] > 10
    assert ct2["bleu"] == pytest.approx(ours["test/float32"]["bleu"])
    rows = {(r["system"], r["engine"], r["weights"], r["batch"]) for r in report["speed"]}
    for name in names:
        for weights in ("float32", "int8"):
            for batch in (1, 32):
                assert (name, "attnlab", weights, batch) in rows
    assert ("ensemble of 2", "ctranslate2", "float32", 1) not in rows  # CT2 has no ensembles
    assert all(r["tokens_per_s"] > 0 for r in report["speed"])
    for row in report["speed"]:  # each pass's CPU time beside its wall clock
        for timed in row["by_threads"].values():
            assert len(timed["cpu_seconds"]) == len(timed["seconds"]) == 1
            assert all(c > 0 for c in timed["cpu_seconds"]) and 0 <= timed["busy_before"] <= 1
    assert any(g["goal"].startswith("ensemble: validation") for g in report["goals"])
    # The paired bootstrap: every system on both splits, against both baselines; the ensemble
    # of a model twice and the model as a student translate as the model: the same resamples
    # give them the same mean and interval.
    for split in ("valid", "test"):
        boot = report["bootstrap"][split]
        assert set(boot) == set(names)
        recipe = boot["recipe model"]
        assert recipe["bleu"] == pytest.approx(quality["recipe model"][f"{split}/float32"]["bleu"])
        assert 0 < recipe["p_vs_ensemble of 2"] <= 1 and recipe["ci95"] >= 0
        for name in names[1:]:
            assert (boot[name]["mean"], boot[name]["ci95"]) == (recipe["mean"], recipe["ci95"])
            assert 0 < boot[name]["p_vs_recipe model"] <= 1
    assert "± " in done.stdout and "(95%)" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| recipe model | attnlab | float32 |" in done.stdout
    # Each teacher alone on both splits; their mean and deviation (the same model twice).
    seeds = report["seeds"]["test/float32"]["bleu"]
    assert seeds["mean"] == pytest.approx(quality["recipe model"]["test/float32"]["bleu"])
    assert seeds["sd"] == pytest.approx(0.0) and report["seeds"]["teachers"] == 2
    # n-gram precisions and imitation: the ensemble of the model twice translates as the model.
    for split in ("valid", "test"):
        recipe = report["analysis"][split]["recipe model"]
        assert len(recipe["precisions"]) == 4 and 0 < recipe["brevity_penalty"] <= 1
        assert recipe["bleu"] == pytest.approx(quality["recipe model"][f"{split}/float32"]["bleu"])
        assert recipe["same_as_ensemble of 2"] == 1.0 and recipe["bleu_vs_ensemble of 2"] >= 0
        assert "bleu_vs_recipe model" not in recipe
    # The numbers recipe decodes greedily: beam 4 on validation beside it.
    (student,) = [s["name"] for s in report["systems"] if s["kind"] == "student"]
    wide = report["beam_of_greedy"][student]
    assert wide["greedy"] == quality[student]["valid/float32"]["bleu"] and wide["beam 4"] >= 0
    assert wide["chrf"]["beam 4"] > 10  # numbers are one token: BLEU may count nothing
    # The engines at the same thread count; how the passes count.
    assert {r["threads"] for r in report["like_threads"]} == {1}
    assert all(r["attnlab_over_ctranslate2"] > 0 for r in report["like_threads"])
    assert "best of 1 timed passes" in report["timing"]
    # The cost of each run on record: its threads, and so its core-hours.
    cost = report["costs"][numbers_model_dir.parent.name]
    assert cost["threads"] >= 1 and cost["busy_minutes"] > 0
    assert cost["core_hours"] == pytest.approx(cost["busy_minutes"] * cost["threads"] / 60)
    # The blind sets: every system, every set, one line per source line, as it translates
    # them alone; an empty line stays empty.
    from attnlab.inference.translator import Translator

    alone = Translator.load(d, device="cpu").translate(flickr)
    assert alone[1] == ""
    blind = report["blind"]
    assert blind["sets"] == {"test_a": 4, "test_b": 2}
    # A run's directory names its system; the student's is a teacher's here, so it is numbered.
    slugs = [numbers_model_dir.parent.name, "seed1", "ensemble", "student0"]
    assert list(blind["systems"]) == slugs
    for slug in slugs:
        for name, lines in (("test_a", 4), ("test_b", 2)):
            path = blind_out / f"{slug}.{name}.de"
            assert path.read_text(encoding="utf-8").count("\n") == lines
            assert blind["systems"][slug]["files"][name]["lines"] == lines
        assert (blind_out / f"{slug}.test_a.de").read_text(encoding="utf-8").splitlines() == alone
    assert blind["systems"]["ensemble"]["decoding"]["beam_size"] == 1
    # The tables the docs quote, printed again from the report alone.
    argv = [sys.executable, str(ROOT / "benchmarks" / "distill.py"), "--markdown", "--out"]
    shown = subprocess.run([*argv, str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "| the teachers' mean |" in shown.stdout and "| student0 | 1 |" in shown.stdout
    assert "| (source lines) | | | 4 | 2 |" in shown.stdout
    # One sentence at a time, profiled, added to that report and nothing else changed.
    argv = [sys.executable, str(ROOT / "benchmarks" / "distill.py"), "--quick", "--profile"]
    argv += ["--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    profiled = json.loads(out.read_text())
    one = profiled.pop("profile")["recipe model"]  # the numbers student is not a fast one
    assert profiled == report
    assert one["sentences"] == 16 and one["tokens"] >= 16 and one["wall_us_per_step"] > 0
    assert one["aten_calls_per_step"] > one["python_calls_per_step"] > 1
    assert one["profiled_wall_us_per_step"] > 0
    assert one["ctranslate2_us_per_token"] > 0 and one["top_ops"][0]["op"].startswith("aten::")
    assert sum(one["shares"].values()) == pytest.approx(1.0)
    assert "aten calls a token" in done.stdout
    # Scores only: read back from the first run's workdir (keyed by the models' files), no
    # timing, no picture.
    again, png2 = tmp_path / "again.json", tmp_path / "again.png"
    argv = [sys.executable, str(ROOT / "benchmarks" / "distill.py"), "--quick", "--no-speed"]
    argv += ["--out", str(again), "--picture", str(png2), "--teachers", d, str(twin)]
    argv += ["--students", d]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scores kept from an earlier run" in done.stdout
    second = json.loads(again.read_text())
    assert second["quality"] == quality and second["ct2_quality"] == report["ct2_quality"]
    assert second["speed"] == [] and not png2.exists()
    assert "no blind sets" in done.stdout and "blind" not in second
    assert (sorted(on_file.iterdir()) if on_file.is_dir() else []) == before  # nothing written


def test_engine_benchmark_quick_run(numbers_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/engine.py --quick on the session's numbers model (and its random d_model 256,
    4 + 4-layer twin): every contender translates every sentence to the torch engine's tokens,
    and the report's rows are self-consistent. No speed is asserted."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "engine.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engine.py"), "--model",
         str(numbers_model_dir), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "ATTNLAB_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "engine" and report["anchor"] == "ct2_direct"
    assert report["all_outputs_equal"] is True
    results = report["results"]
    assert [(r["model"], r["threads"]) for r in results] == [("trained", 1), ("random_d256_4+4", 1)]
    assert results[1]["config"]["d_model"] == 256
    contenders = {"ct2_direct", "ct2_direct_scored", "torch", "ctranslate2", "ctranslate2_batch1"}
    for r in results:
        assert set(r["contenders"]) == set(r["ratio_to_anchor"]) == contenders
        assert r["equal_to_torch"] == dict.fromkeys(contenders, r["sentences"]) and r["sentences"]
        assert r["mismatches"] == {} and r["ratio_to_anchor"]["ct2_direct"] == 1.0
        for entry in r["contenders"].values():
            assert 0 < entry["ms_per_sentence_best"] <= entry["ms_per_sentence_median"]
        assert set(r["goal_batch1"]) == {"ratio", "target", "passed"}
    assert "CTranslate2 direct" in done.stdout and "wrote" in done.stdout
