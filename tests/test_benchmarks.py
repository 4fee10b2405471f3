"""Smoke runs of the benchmark scripts (`make bench` runs them in full).

These check that the scripts run and report sane, self-consistent numbers; they do not check
speed, which only the full benchmark on a quiet machine can say.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_attention_benchmark_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "attention.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "attention.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
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
    assert "ratio" in done.stdout
