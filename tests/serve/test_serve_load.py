"""A short load test of the explorer (`make test-load` runs the full one: 50 clients for 60 s,
benchmarks/serve_load.py): 20 concurrent clients, each on its own connection, ask a fixed
number of requests of the usual mix against a real uvicorn server on 127.0.0.1 with a small
queue. Every answer is a 200 or a 503, some are 200s, and afterwards the server answers as the
library does. Then a tiny run of the benchmark's translate-only mix. No latency is asserted."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from attnlab.serve import create_app
from attnlab.serve.limits import Limits
from attnlab.serve.process import make_server, url_of

ROOT = Path(__file__).resolve().parents[2]


def _load_script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # as when it runs: its own modules
    spec = importlib.util.spec_from_file_location("serve_load", ROOT / "benchmarks/serve_load.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_twenty_clients_get_200_or_503_and_the_server_still_answers(numbers_model_dir, monkeypatch):
    serve_load = _load_script(monkeypatch)
    app = create_app(numbers_model_dir, device="cpu", limits=Limits(queue=2))
    server, sock = make_server(app, port=0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        url = url_of(sock)
        answers = asyncio.run(serve_load.load(url, 20, requests=8, seed=7))
        assert len(answers) == 160
        statuses = {answer.status for answer in answers}
        assert statuses <= {200, 503}, statuses
        admitted = [a for a in answers if a.status == 200]
        assert {a.route for a in admitted} >= {"model", "positional", "masks"}
        assert any(a.route in ("attention", "translate") for a in admitted)
        refused = sum(a.status == 503 for a in answers)
        counts = app.state.queue.counts
        assert refused == counts["refused"] + counts["expired"]  # every 503 was the queue's
        for text in ("forty-two", "three hundred and twelve"):  # and it still answers right
            answer = httpx.post(url + "api/translate", json={"text": text}, timeout=120)
            assert answer.status_code == 200
            assert answer.json() == app.state.explorer.translate(text)
        assert app.state.queue.pending == 0
    finally:
        server.should_exit = True
        thread.join(timeout=120)
        sock.close()
        app.state.queue.close()


@pytest.mark.slow
def test_the_translate_mix_runs_both_modes_and_checks_itself(numbers_model_dir, tmp_path):
    """benchmarks/serve_load.py --mix translate at a tiny size (its figures are not asserted):
    it stops by itself, runs the queue and the batcher at each client count, finds the batched
    translations equal to those of /api/translate alone, and reports no failure."""
    out = tmp_path / "translate.json"
    command = [sys.executable, str(ROOT / "benchmarks/serve_load.py"), "--mix", "translate"]
    command += ["--model", str(numbers_model_dir), "--client-counts", "1,2", "--seconds", "0.5"]
    command += ["--soak-seconds", "0.6", "--threads", "1", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "batcher/queue" in done.stdout and "soak 2" in done.stdout
    (result,) = json.loads(out.read_text())
    assert [(r["clients"], r["mode"]) for r in result["rounds"]] == [
        (1, "queue"), (1, "batcher"), (2, "queue"), (2, "batcher"),
    ]  # fmt: skip
    assert [c["mismatches"] for c in result["correctness"]] == [0, 0]
    assert all(r["requests"] > 0 for r in result["rounds"])
    assert set(result["ratios"]) == {"1", "2"}
    assert result["queue"] == result["translate_queue"] == 256  # the queue at its best
    assert all(r["wrong"] == 0 and r["checked"] > 0 for r in result["rounds"])
    assert "answered (200) requests only" in result["latency"]
    # Decoding alone, no server: what batching can give on this model and set.
    bound = result["decode_bound"]
    assert bound["sentences"] == 200 and 0 < bound["ending"] <= 200 and bound["batch"] == 32
    for subset in ("all", "ending_only"):
        assert bound[subset]["one_ms"] > 0 and bound[subset]["batch_ms"] > 0
        one, batched = bound[subset]["one_ms"], bound[subset]["batch_ms"]
        assert bound[subset]["ratio"] == pytest.approx(one / batched, abs=0.02)
    assert "decoding alone (the torch Translator, no server)" in done.stdout


@pytest.mark.slow
def test_the_translate_mix_with_both_engines(numbers_model_dir, tmp_path):
    """--engines torch,torch-whole,ctranslate2 at a tiny size: each client count asks the
    queue, the torch batcher (streaming its greedy requests), the torch batcher of a server with
    --batching whole and the ctranslate2 batcher (--api-only servers); every answer of each is
    its engine's translation of the sentence alone; the ratios and goals are there (not
    asserted); whole batches get no soak and no goal."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "translate.json"
    command = [sys.executable, str(ROOT / "benchmarks/serve_load.py"), "--mix", "translate"]
    command += ["--model", str(numbers_model_dir), "--client-counts", "1,2", "--seconds", "0.5"]
    command += ["--soak-seconds", "0.6", "--threads", "1"]
    command += ["--engines", "torch,torch-whole,ctranslate2"]
    env = {**os.environ, "ATTNLAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(out.read_text())
    assert [(r["clients"], r["mode"], r["engine"]) for r in result["rounds"]] == [
        (c, mode, engine) for c in (1, 2)
        for mode, engine in (("queue", "torch"), ("batcher", "torch"),
                             ("batcher", "torch-whole"), ("batcher", "ctranslate2"))
    ]  # fmt: skip
    checks = result["correctness_by_engine"]
    assert {e: [c["mismatches"] for c in checks[e]] for e in checks} == {
        "torch": [0, 0], "torch-whole": [0, 0], "ctranslate2": [0, 0],
    }  # fmt: skip
    for r in [*result["rounds"], *result["soak"]]:
        assert r["requests"] > 0 and r["wrong"] == 0 and r["checked"] > 0, r
    assert [(r["engine"], r["soak"]) for r in result["soak"]] == [
        ("torch", 1), ("torch", 2), ("ctranslate2", 1), ("ctranslate2", 2),
    ]  # fmt: skip
    assert set(result["ctranslate2_over_torch"]) == {"1", "2"}
    assert set(result["batcher_over_queue"]) == {"torch", "torch-whole", "ctranslate2"}
    assert not any("torch-whole" in g["goal"] for g in result["goals"])
    assert "torch batcher streaming / decoding whole batches, 2 client(s)" in done.stdout
    assert result["queue_best"] is None or result["queue_best"]["clients"] in (1, 2)
    assert any("ctranslate2 / torch" in g["goal"] for g in result["goals"])
    assert "PASS" in done.stdout or "FAIL" in done.stdout


def _join_script(monkeypatch):
    _load_script(monkeypatch)  # its serve_load, as when it runs
    spec = importlib.util.spec_from_file_location("serve_join", ROOT / "benchmarks/serve_join.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_join_benchmark_fails_on_a_wrong_answer_or_a_status_not_200_or_503(monkeypatch):
    join = _join_script(monkeypatch)
    good = {"clients": 2, "setting": "ratio 4", "wrong": 0, "statuses": {"200": 5, "503": 1}}
    bad = [{**good, "wrong": 2}, {**good, "statuses": {"500": 1}}]
    result = {"threads": 1, "rounds": [good, *bad]}
    assert join.failures(result) == [
        "threads 1, 2 clients, ratio 4: 2 answers unlike the sentence alone",
        "threads 1, 2 clients, ratio 4: statuses {'500': 1}",
    ]
    assert join.failures({"threads": 1, "rounds": [good]}) == []


@pytest.mark.slow
def test_the_join_benchmark_runs_each_ratio_and_checks_every_answer(numbers_model_dir, tmp_path):
    """benchmarks/serve_join.py at a tiny size (its figures are not asserted): a server decoding
    whole batches and one per ratio, each ratio set in its own server's process; every answer is
    its sentence's translation alone; each setting keeps its best round, in a table."""
    out = tmp_path / "join.json"
    command = [sys.executable, str(ROOT / "benchmarks/serve_join.py")]
    command += ["--model", str(numbers_model_dir), "--ratios", "0,1000", "--client-counts", "2"]
    command += ["--threads", "1", "--seconds", "0.5", "--repeats", "2", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for ratio in ("0", "1000"):
        assert f"a server joining at JOIN_RATIO {ratio}\n" in done.stderr
    (result,) = json.loads(out.read_text())
    settings = result["settings"]
    assert settings == ["whole batches", "ratio 0", "ratio 1000"]
    assert [(r["repeat"], r["setting"]) for r in result["rounds"]] == [
        (repeat, setting) for repeat in (0, 1) for setting in settings
    ]
    for r in result["rounds"]:
        assert r["requests"] > 0 and r["checked"] > 0 and r["wrong"] == 0 and r["batches"] > 0
    best = {row["setting"]: row for row in result["best"]}
    assert list(best) == settings and best["whole batches"]["over_whole"] == 1.0
    for setting, row in best.items():
        rates = [r["sentences_per_second"] for r in result["rounds"] if r["setting"] == setting]
        assert row["sentences_per_second"] == max(rates)
    assert "| 1 | 2 | ratio 1000 |" in done.stdout


JOIN_RESULTS = ROOT / "benchmarks/results/serve_join.json"


def test_the_serve_pages_quote_the_join_table(monkeypatch):
    """docs/serve.md and its Chinese page carry the table of benchmarks/results/serve_join.json
    as ``benchmarks/serve_join.py --markdown`` prints it, every figure as measured."""
    join = _join_script(monkeypatch)
    report = json.loads(JOIN_RESULTS.read_text(encoding="utf-8"))
    table = join.table(report)
    for page in ("docs/serve.md", "docs/serve.zh.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert table in text, f"{page}: not the table of serve_join.json (serve_join.py --markdown)"


def test_the_batcher_joins_at_the_ratio_the_join_benchmark_found_fastest():
    """attnlab.serve.batcher.JOIN_RATIO is the ratio of benchmarks/results/serve_join.json with
    the most sentences/s at every thread count and client count it measured."""
    from attnlab.serve import batcher

    report = json.loads(JOIN_RESULTS.read_text(encoding="utf-8"))
    for result in report:
        for clients in result["client_counts"]:
            ratios = [
                row
                for row in result["best"]
                if row["clients"] == clients and row["setting"].startswith("ratio ")
            ]
            fastest = max(ratios, key=lambda row: row["sentences_per_second"])
            where = f"{result['threads']} thread(s), {clients} clients"
            assert fastest["setting"] == f"ratio {batcher.JOIN_RATIO:g}", where
