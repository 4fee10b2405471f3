"""``attnlab download multi30k``: fetched on purpose from a local HTTP server on 127.0.0.1 serving
small stand-in ``.gz`` files whose SHA-256 is patched in, so that no test needs the network or
the real data. A good download, files already there, a truncated answer, a wrong checksum, a
damaged copy, and the progress lines."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import io
import threading
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.cli.download import _Progress
from attnlab.data import corpora, download
from attnlab.data.corpora import MULTI30K_SHA256, multi30k

#: A stand-in for each of the nine raw files: a few gzipped captions, made the same every run.
FILES = {
    name: gzip.compress(
        "".join(
            f"{name.split('.')[0]} caption {i} in {name.split('.')[1]}\n" for i in range(3)
        ).encode(),
        mtime=0,
    )
    for name in MULTI30K_SHA256
}


@pytest.fixture(autouse=True)
def _stand_in_digests(monkeypatch):
    """The published digests replaced by the stand-ins' own, in a fresh process's state, with
    no directory or mirror from the caller's environment."""
    table = {name: (hashlib.sha256(data).hexdigest(), len(data)) for name, data in FILES.items()}
    monkeypatch.setattr(corpora, "MULTI30K_SHA256", table)
    monkeypatch.setattr(download, "_VERIFIED", set())
    monkeypatch.delenv("ATTNLAB_MULTI30K", raising=False)
    monkeypatch.delenv("ATTNLAB_MULTI30K_URL", raising=False)


@contextlib.contextmanager
def site(files: dict[str, bytes], short: dict[str, int] | None = None):
    """An HTTP server on 127.0.0.1 (a free port) answering ``/raw/NAME`` with ``files[NAME]``
    under its full Content-Length, but ``short[NAME]`` bytes fewer sent before the connection
    closes. Yields (base URL, the names requested)."""
    requested: list[str] = []
    short = short or {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.rsplit("/", 1)[-1]
            requested.append(name)
            if name not in files:
                self.send_error(404)
                return
            body = files[name]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) - short.get(name, 0)])
            self.close_connection = True

        def log_message(self, *args):  # keep the test output clean
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/raw/", requested
        finally:
            server.shutdown()
            thread.join()


def _names(directory: Path) -> list[str]:
    """Everything in ``directory``, temporaries included."""
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def _one_error_line(err: str) -> str:
    """The error of a failed command: exactly one line says error, and no traceback."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1, err
    assert err.splitlines()[-1] == errors[0], err  # the last line, on a line of its own
    return errors[0]


def test_a_good_download_is_checked_saved_and_says_where(tmp_path, capsys):
    data = tmp_path / "data"
    with site(FILES) as (url, requested):
        assert main(["download", "multi30k", "--data-dir", str(data), "--url", url]) == 0
    assert sorted(requested) == sorted(FILES)
    assert _names(data) == sorted(FILES)  # the nine files, no temporaries
    for name, body in FILES.items():
        assert (data / name).read_bytes() == body
    out, err = capsys.readouterr()
    assert f"is in {data}: 9 files, 9 downloaded, 0 already there" in out
    assert f"export ATTNLAB_MULTI30K={data.resolve()}" in out  # not where attnlab looks
    progress = err.splitlines()
    assert len(progress) == 9 and all(line.endswith("(100%)") for line in progress)
    size = len(FILES["train.en.gz"])
    assert f"[1/9] train.en.gz: {size:,} of {size:,} bytes (100%)" in progress[0]
    # What attnlab train --task multi30k reads.
    corpus = multi30k(data, src_lang="de", tgt_lang="fr")
    assert corpus["valid"][2] == ("val caption 2 in de", "val caption 2 in fr")


def test_files_already_there_are_checked_not_fetched_again(tmp_path, capsys, monkeypatch):
    data = tmp_path / "cache"
    monkeypatch.setenv("ATTNLAB_MULTI30K", str(data))  # the default directory
    for name in ("train.en.gz", "val.de.gz"):
        data.mkdir(exist_ok=True)
        (data / name).write_bytes(FILES[name])
    with site(FILES) as (url, requested):
        assert main(["download", "multi30k", "--url", url]) == 0
        assert len(requested) == 7
        capsys.readouterr()
        assert main(["download", "multi30k", "--url", url]) == 0
        assert len(requested) == 7  # nothing asked the second time
    out, err = capsys.readouterr()
    assert f"is in {data}: 9 files, 0 downloaded, 9 already there" in out
    assert "the tests read it from there" in out and err == ""


def test_a_truncated_download_is_refused_and_leaves_nothing(tmp_path, capsys):
    data = tmp_path / "data"
    size = len(FILES["train.en.gz"])
    with site(FILES, short={"train.en.gz": 10}) as (url, _):
        status = main(["download", "multi30k", "--data-dir", str(data), "--url", url])
    assert status == 1  # a failed download: a failure at run time, as elsewhere
    line = _one_error_line(capsys.readouterr().err)
    assert line == (
        f"attnlab download: error: could not download train.en.gz from {url}train.en.gz: the "
        f"connection closed after {size - 10:,} of {size:,} bytes (a truncated download); "
        f"nothing was saved"
    )
    assert _names(data) == []  # neither the file nor a temporary


def test_a_later_truncated_file_keeps_the_checked_ones_before_it(tmp_path, capsys):
    data = tmp_path / "data"
    with site(FILES, short={"val.en.gz": 1}) as (url, _):
        assert main(["download", "multi30k", "--data-dir", str(data), "--url", url]) == 1
    assert "val.en.gz" in _one_error_line(capsys.readouterr().err)
    assert _names(data) == ["train.de.gz", "train.en.gz", "train.fr.gz"]  # complete, checked
    with site(FILES) as (url, requested):  # the next run fetches only what is missing
        assert main(["download", "multi30k", "--data-dir", str(data), "--url", url]) == 0
    assert len(requested) == 6 and _names(data) == sorted(FILES)


def test_a_wrong_checksum_is_refused_and_leaves_nothing(tmp_path, capsys):
    data = tmp_path / "data"
    other = {**FILES, "train.en.gz": gzip.compress(b"Not the published file.\n", mtime=0)}
    expected = corpora.MULTI30K_SHA256["train.en.gz"][0]
    with site(other) as (url, _):
        status = main(["download", "multi30k", "--data-dir", str(data), "--url", url])
    assert status == 2  # as `attnlab train --task multi30k` reports the same refusal
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"attnlab download: error: train.en.gz downloaded from {url}")
    assert f"has sha256 {hashlib.sha256(other['train.en.gz']).hexdigest()}" in line
    assert f"expected {expected}" in line and line.endswith("it was not saved")
    assert _names(data) == []


def test_a_damaged_copy_already_there_is_named(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "val.fr.gz").write_bytes(FILES["val.en.gz"])
    with site(FILES) as (url, requested):
        assert main(["download", "multi30k", "--data-dir", str(data), "--url", url]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{data / 'val.fr.gz'}: sha256 " in line and "delete it to download it again" in line
    assert requested == []  # checked before anything is fetched


def test_the_errors_of_a_server_and_of_the_directory(tmp_path, capsys):
    with site({}) as (url, _):
        assert main(["download", "multi30k", "--data-dir", str(tmp_path / "d"), "--url", url]) == 1
    assert "could not download train.en.gz from" in _one_error_line(capsys.readouterr().err)
    (tmp_path / "a-file").write_text("x")
    assert main(["download", "multi30k", "--data-dir", str(tmp_path / "a-file")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.endswith(f"--data-dir: {tmp_path / 'a-file'} is a file, expected a directory")


def test_download_names_its_data_set(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["download"])
    assert exit.value.code == 2
    assert "DATASET" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_one_line_that_updates():
    stream = _Terminal()
    progress = _Progress(stream, count=2)
    progress("a.gz", 0, 200)
    progress("a.gz", 200, 200)
    progress("b.gz", 0, 50)
    progress.close()  # an error came: the open line is ended
    text = stream.getvalue()
    assert text == (
        "\rattnlab download: [1/2] a.gz: 0 of 200 bytes (0%)"
        "\rattnlab download: [1/2] a.gz: 200 of 200 bytes (100%)\n"
        "\rattnlab download: [2/2] b.gz: 0 of 50 bytes (0%)\n"
    )
