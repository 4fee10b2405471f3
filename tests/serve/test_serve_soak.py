"""A smoke run of benchmarks/serve_soak.py (`make soak` runs the hour): a few seconds, 8 clients
and a bounded number of requests each, with keys and limits on. Its correctness goals are
asserted (no 5xx but 503, none unanswered, every 200 its sentence's translation alone); its
memory and latency goals are not: they mean something only over the hour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_soak_breaks_nothing_and_every_answer_is_right(numbers_model_dir, tmp_path):
    out = tmp_path / "soak.json"
    command = [sys.executable, str(ROOT / "benchmarks/serve_soak.py"), "--model"]
    command += [str(numbers_model_dir), "--minutes", "0.15", "--clients", "8", "--requests"]
    command += ["15", "--idle-requests", "10", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["errors_5xx"], result["unanswered"], result["wrong"]) == (0, 0, 0), result
    assert result["checked"] > 0 and result["polite_answered"] > 0
    assert result["batching"] == "stream"  # the server's default, recorded
    roles = result["by_role"]
    assert set(roles) == {"polite", "flood", "disconnect", "burst"}, roles
    assert roles["flood"].get("429", 0) > 0  # the flooder's own limit: 10 a minute
    assert roles["burst"].get("200", 0) > 0 and result["burst_closed"] == 0  # 8 + 32 < 512
    assert result["limited_by_key"].get("flood-0", 0) == roles["flood"]["429"]
    assert "| polite clients' p99 / the idle service's p99 |" in done.stdout
    assert [g["target"] for g in result["goals"]] == ["<= 0", "<= 0", "<= 0", "<= 1.05", "<= 2"]
