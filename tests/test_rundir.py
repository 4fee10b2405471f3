"""The names of a run directory's files and their readers (attnlab._rundir): one home for each
name, the one reader of job.json, and the complete checkpoints of a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab import _rundir
from attnlab._rundir import CHECKPOINT_FILES, JOB_FILE, find_checkpoints, read_job_file


def test_job_json_has_one_reader_whose_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / JOB_FILE
    with pytest.raises(FileNotFoundError, match=r"job\.json: missing; the model was not saved"):
        read_job_file(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"job\.json: missing; why not$"):
        read_job_file(tmp_path, why="why not")
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"job\.json: expected a JSON object, got list"):
        read_job_file(tmp_path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"job\.json: invalid JSON at line 1"):
        read_job_file(tmp_path)
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=r"job\.json: not UTF-8 text"):
        read_job_file(tmp_path)
    path.write_text('{"task": {"name": "numbers"}}', encoding="utf-8")
    assert read_job_file(tmp_path) == {"task": {"name": "numbers"}}


def test_find_checkpoints_lists_the_complete_ones_oldest_first(tmp_path: Path) -> None:
    assert find_checkpoints(tmp_path) == []
    root = tmp_path / "checkpoints"
    for name, files in (
        ("step-00000200", CHECKPOINT_FILES),
        ("step-00000010", CHECKPOINT_FILES),
        ("step-00000300", CHECKPOINT_FILES[:-1]),  # interrupted: a file missing
        ("damaged-step-00000100", CHECKPOINT_FILES),
        ("step-x", CHECKPOINT_FILES),
    ):
        (root / name).mkdir(parents=True)
        for file in files:
            (root / name / file).write_bytes(b"")
    assert find_checkpoints(tmp_path) == [root / "step-00000010", root / "step-00000200"]


def test_each_name_has_one_home() -> None:
    """The modules that write and load the files import the names from here."""
    from attnlab.data import tokenizer
    from attnlab.inference import modeldir
    from attnlab.models import saved
    from attnlab.train import checkpoint

    assert saved.CONFIG_FILE is _rundir.CONFIG_FILE and saved.WEIGHTS_FILE is _rundir.WEIGHTS_FILE
    assert (
        tokenizer.TOKENIZER_FILE,
        tokenizer.SRC_TOKENIZER_FILE,
        tokenizer.TGT_TOKENIZER_FILE,
    ) == (_rundir.TOKENIZER_NAMES)
    assert checkpoint.CHECKPOINT_FILES is _rundir.CHECKPOINT_FILES
    assert checkpoint.find_checkpoints is find_checkpoints
    assert modeldir.JOB_FILE is JOB_FILE
