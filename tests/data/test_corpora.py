"""Corpora: the numbers demo, Multi30K (local files and the verified download), parallel files,
plain text, and the reader's errors.

Tests that need the real Multi30K files read them from MULTI30K_DIR (where attnlab looks:
tests/_paths.py) and skip, naming `attnlab download multi30k`, where they are missing; they
never copy the data into the repository. The download is tested
against a local HTTP server on 127.0.0.1 serving temporary copies.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest

from _paths import MULTI30K_DIR, needs_multi30k
from attnlab.data import corpora, download
from attnlab.data.corpora import (
    MULTI30K_SHA256,
    ParallelCorpus,
    default_multi30k_dir,
    multi30k,
    numbers,
    parallel_files,
    read_lines,
    text_corpus,
)


@pytest.fixture(autouse=True)
def _no_multi30k_env(monkeypatch):
    """The tests choose the directory and URL themselves; the caller's settings must not leak."""
    monkeypatch.delenv("ATTNLAB_MULTI30K", raising=False)
    monkeypatch.delenv("ATTNLAB_MULTI30K_URL", raising=False)


# ---------------------------------------------------------------------------------------------
# numbers


def test_numbers_writes_each_number_once_in_both_languages():
    corpus = numbers(low=0, high=999, valid_size=100, test_size=50, seed=3)
    assert (corpus.name, corpus.src_lang, corpus.tgt_lang) == ("numbers", "en", "de")
    assert [len(corpus[s]) for s in ("train", "valid", "test")] == [850, 100, 50]
    all_pairs = corpus["train"] + corpus["valid"] + corpus["test"]
    assert len(set(all_pairs)) == 1000  # every number once, and splits disjoint
    assert ("three hundred and forty-two", "dreihundertzweiundvierzig") in all_pairs
    assert ("zero", "null") in all_pairs


def test_numbers_splits_are_seeded_and_deterministic():
    a = numbers(high=299, valid_size=20, test_size=20, seed=0)
    b = numbers(high=299, valid_size=20, test_size=20, seed=0)
    c = numbers(high=299, valid_size=20, test_size=20, seed=1)
    assert a.splits == b.splits
    assert a["valid"] != c["valid"]
    assert set(a["train"] + a["valid"] + a["test"]) == set(c["train"] + c["valid"] + c["test"])


def test_numbers_other_languages_and_ranges():
    corpus = numbers(src_lang="de", tgt_lang="fr", low=-5, high=5, valid_size=1, test_size=1)
    pairs = dict(corpus["train"] + corpus["valid"] + corpus["test"])
    assert pairs["minus fünf"] == "moins cinq"
    assert len(pairs) == 11


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"src_lang": "xx"}, r"src_lang: num2words has no language 'xx'"),
        ({"tgt_lang": "klingon"}, r"tgt_lang: num2words has no language 'klingon'"),
        ({"low": 10, "high": 5}, r"low <= high"),
        ({"high": 99, "valid_size": 50, "test_size": 50}, r"fewer than the 100 numbers"),
        ({"valid_size": -1}, r"valid_size: expected an int >= 0"),
        ({"low": 1.5}, r"low: expected an int"),
    ],
)
def test_numbers_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        numbers(**kwargs)


# ---------------------------------------------------------------------------------------------
# read_lines


def test_read_lines_plain_gzip_crlf_and_bom(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_bytes("\ufeffeins\r\n  zwei \n\ndrei".encode())
    assert read_lines(plain) == ["eins", "  zwei ", "", "drei"]
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress("Männer\nfünf\n".encode()))
    assert read_lines(packed) == ["Männer", "fünf"]
    # gzip is told by its magic bytes, not by the name (as the shard preparation reads it).
    unnamed = tmp_path / "a.txt"
    unnamed.write_bytes(gzip.compress("Männer\n".encode()))
    assert read_lines(unnamed) == ["Männer"]
    misnamed = tmp_path / "plain.en.gz"
    misnamed.write_bytes(b"plain text")
    assert read_lines(misnamed) == ["plain text"]


def test_read_lines_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.txt: no such file"):
        read_lines(tmp_path / "missing.txt")
    with pytest.raises(IsADirectoryError, match=r"is a directory, expected a text file"):
        read_lines(tmp_path)
    empty = tmp_path / "empty.de"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.de: the file is empty"):
        read_lines(empty)
    latin1 = tmp_path / "latin1.de"
    latin1.write_bytes(b"ok\nok\nM\xe4nner\n")
    with pytest.raises(ValueError, match=r"latin1\.de: line 3: not UTF-8 \(byte 0xe4 at column 2"):
        read_lines(latin1)
    fake_gz = tmp_path / "fake.en.gz"
    fake_gz.write_bytes(gzip.compress(b"plain text\n")[:12])  # gzip's header, cut short
    with pytest.raises(ValueError, match=r"fake\.en\.gz: not a valid gzip file"):
        read_lines(fake_gz)
    bad_in_gz = tmp_path / "bad.en.gz"
    bad_in_gz.write_bytes(gzip.compress(b"a\n\xff\n"))
    with pytest.raises(ValueError, match=r"bad\.en\.gz: line 2: not UTF-8"):
        read_lines(bad_in_gz)


# ---------------------------------------------------------------------------------------------
# parallel_files


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_parallel_files_pairs_lines_and_strips(tmp_path):
    src = _write(tmp_path / "train.en", ["Two men. ", "A dog"])
    tgt = _write(tmp_path / "train.de", [" Zwei Männer.", "Ein Hund"])
    vsrc = _write(tmp_path / "valid.en", ["A cat"])
    vtgt = _write(tmp_path / "valid.de", ["Eine Katze"])
    corpus = parallel_files((src, tgt), (str(vsrc), str(vtgt)), src_lang="en", tgt_lang="de")
    assert corpus["train"] == [("Two men.", "Zwei Männer."), ("A dog", "Ein Hund")]
    assert corpus["valid"] == [("A cat", "Eine Katze")]
    assert sorted(corpus.splits) == ["train", "valid"]
    with pytest.raises(KeyError, match=r"split 'test': the 'files' corpus has splits"):
        corpus["test"]
    assert repr(corpus) == "ParallelCorpus(name='files', en->de, pairs: train=2, valid=1)"


def test_parallel_files_errors_name_files_and_lines(tmp_path):
    src = _write(tmp_path / "a.en", ["one", "two", "three"])
    short = _write(tmp_path / "a.de", ["eins", "zwei"])
    with pytest.raises(ValueError, match=r"a\.en has 3 lines, .*a\.de has 2"):
        parallel_files((src, short))
    holed = _write(tmp_path / "b.de", ["eins", "  ", "drei"])
    with pytest.raises(ValueError, match=r"b\.de: line 2 is empty"):
        parallel_files((src, holed))
    with pytest.raises(FileNotFoundError, match=r"nope\.de"):
        parallel_files((src, tmp_path / "nope.de"))
    with pytest.raises(ValueError, match=r"valid: expected a pair of paths"):
        parallel_files((src, src), valid=str(src))


# ---------------------------------------------------------------------------------------------
# text_corpus


def test_text_corpus_splits_lines_deterministically(tmp_path):
    path = _write(tmp_path / "text.txt", [f"line {i}" for i in range(100)] + ["", "   "])
    split = text_corpus(path, valid_fraction=0.1, seed=0)
    assert (len(split["train"]), len(split["valid"])) == (90, 10)
    assert sorted(split["train"] + split["valid"]) == sorted(f"line {i}" for i in range(100))
    assert split["valid"] == sorted(split["valid"], key=lambda s: int(s.split()[1]))  # file order
    assert text_corpus(path, valid_fraction=0.1, seed=0) == split
    assert text_corpus(path, valid_fraction=0.1, seed=1) != split
    assert text_corpus(path, valid_fraction=0)["valid"] == []


def test_text_corpus_errors(tmp_path):
    one = _write(tmp_path / "one.txt", ["only line"])
    with pytest.raises(ValueError, match=r"one\.txt: 1 non-blank lines are too few"):
        text_corpus(one)
    with pytest.raises(ValueError, match=r"valid_fraction: expected a number in \[0, 1\)"):
        text_corpus(one, valid_fraction=1.0)


# ---------------------------------------------------------------------------------------------
# Multi30K from local files


@needs_multi30k
def test_sha256_table_matches_the_real_files():
    on_disk = {p.name: p for p in MULTI30K_DIR.glob("*.gz")}
    assert sorted(on_disk) == sorted(MULTI30K_SHA256)
    for name, (digest, size) in MULTI30K_SHA256.items():
        data = on_disk[name].read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), name


@needs_multi30k
def test_multi30k_real_files_have_the_published_sizes():
    corpus = multi30k(MULTI30K_DIR, download=False)
    assert {s: len(p) for s, p in corpus.splits.items()} == {
        "train": 29000,
        "valid": 1014,
        "test": 1000,
    }
    assert corpus["train"][0] == (
        "Two young, White males are outside near many bushes.",
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    )
    french = multi30k(MULTI30K_DIR, src_lang="fr", tgt_lang="en", download=False)
    assert [len(french[s]) for s in ("train", "valid", "test")] == [29000, 1014, 1000]
    assert french["test"][0][1] == corpus["test"][0][0]  # the same English captions
    for pairs in corpus.splits.values():  # stripped, never empty
        assert all(s and s == s.strip() and t and t == t.strip() for s, t in pairs)


def test_multi30k_reads_plain_and_gzip_files(tmp_path):
    for stem, n in (("train", 3), ("val", 2), ("test_2016_flickr", 1)):
        for lang in ("en", "de"):
            text = "".join(f" {stem} {lang} {i} \n" for i in range(n)).encode()
            if stem == "val":
                (tmp_path / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text))
            else:
                (tmp_path / f"{stem}.{lang}").write_bytes(text)
    corpus = multi30k(tmp_path, src_lang="de", tgt_lang="en", download=False)
    assert corpus["train"][2] == ("train de 2", "train en 2")
    assert corpus["valid"] == [("val de 0", "val en 0"), ("val de 1", "val en 1")]
    assert corpus["test"] == [("test_2016_flickr de 0", "test_2016_flickr en 0")]


def test_multi30k_missing_files_without_download(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"lacks train\.en\.gz, train\.de\.gz, val\.en"):
        multi30k(tmp_path, download=False)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"src_lang": "cs"}, r"src_lang: Multi30K has languages \('en', 'de', 'fr'\), got 'cs'"),
        ({"tgt_lang": "en"}, r"expected two languages, got 'en' twice"),
        ({"timeout": 0}, r"timeout: expected a positive number"),
    ],
)
def test_multi30k_bad_arguments(tmp_path, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        multi30k(tmp_path, download=False, **kwargs)


def test_default_multi30k_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_multi30k_dir() == Path.home() / ".cache" / "attnlab" / "multi30k"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_multi30k_dir() == tmp_path / "xdg" / "attnlab" / "multi30k"
    monkeypatch.setenv("ATTNLAB_MULTI30K", str(tmp_path / "mine"))
    assert default_multi30k_dir() == tmp_path / "mine"


# ---------------------------------------------------------------------------------------------
# Multi30K download, against a local server


@contextlib.contextmanager
def serve(directory: Path):
    """An HTTP server on 127.0.0.1 (a free port) serving ``directory``; yields (base URL,
    list of requested paths)."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):  # keep the test output clean
            pass

    handler = functools.partial(Handler, directory=str(directory))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/raw/", requested
        finally:
            server.shutdown()
            thread.join()


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@needs_multi30k
def test_multi30k_downloads_verifies_and_caches(tmp_path):
    served = tmp_path / "site" / "raw"
    shutil.copytree(MULTI30K_DIR, served)
    cache = tmp_path / "cache"
    with serve(tmp_path / "site") as (url, requested):
        corpus = multi30k(cache, base_url=url)
        assert sorted(requested) == sorted(
            f"/raw/{stem}.{lang}.gz"
            for stem in ("train", "val", "test_2016_flickr")
            for lang in ("en", "de")
        )
        assert multi30k(cache, base_url=url).splits == corpus.splits  # read from the cache
        assert len(requested) == 6
    assert corpus.splits == multi30k(MULTI30K_DIR, download=False).splits
    assert len(_leftovers(cache)) == 6  # the six files, no temporaries
    for path in cache.iterdir():
        assert path.read_bytes() == (MULTI30K_DIR / path.name).read_bytes()


@needs_multi30k
def test_multi30k_download_location_and_url_from_the_environment(tmp_path, monkeypatch):
    shutil.copytree(MULTI30K_DIR, tmp_path / "site" / "raw")
    with serve(tmp_path / "site") as (url, requested):
        monkeypatch.setenv("ATTNLAB_MULTI30K", str(tmp_path / "env-dir"))
        monkeypatch.setenv("ATTNLAB_MULTI30K_URL", url.rstrip("/"))  # with or without a slash
        corpus = multi30k(src_lang="fr", tgt_lang="en")
    assert len(corpus["valid"]) == 1014
    assert len(requested) == 6
    assert sorted(_leftovers(tmp_path / "env-dir"))[0] == "test_2016_flickr.en.gz"


def test_multi30k_bad_digest_is_refused_and_nothing_is_saved(tmp_path):
    site = tmp_path / "site" / "raw"
    site.mkdir(parents=True)
    tampered = gzip.compress(b"Two young men.\n")
    for name in MULTI30K_SHA256:
        (site / name).write_bytes(tampered)
    cache = tmp_path / "cache"
    expected, _ = MULTI30K_SHA256["train.en.gz"]
    actual = hashlib.sha256(tampered).hexdigest()
    with (
        serve(tmp_path / "site") as (url, _),
        pytest.raises(ValueError, match=r"train\.en\.gz downloaded from .* has sha256") as error,
    ):
        multi30k(cache, base_url=url)
    assert expected in str(error.value)
    assert actual in str(error.value)
    assert _leftovers(cache) == []  # neither the file nor a temporary


@needs_multi30k
def test_multi30k_a_corrupted_copy_of_the_real_file_is_refused(tmp_path):
    site = tmp_path / "site" / "raw"
    shutil.copytree(MULTI30K_DIR, site)
    data = bytearray((site / "val.de.gz").read_bytes())
    data[len(data) // 2] ^= 0x01
    (site / "val.de.gz").write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with serve(tmp_path / "site") as (url, _), pytest.raises(ValueError) as error:
        multi30k(cache, base_url=url)
    message = str(error.value)
    assert "val.de.gz" in message
    assert MULTI30K_SHA256["val.de.gz"][0] in message
    assert hashlib.sha256(bytes(data)).hexdigest() in message
    # The files before it in the download order were verified and kept; val.de.gz was not.
    assert "val.de.gz" not in _leftovers(cache)
    assert not [name for name in _leftovers(cache) if name.endswith(".tmp")]


def test_multi30k_http_errors_name_the_file_and_url(tmp_path):
    (tmp_path / "site" / "raw").mkdir(parents=True)
    with (
        serve(tmp_path / "site") as (url, _),
        pytest.raises(OSError, match=r"could not download train\.en\.gz from http.*HTTP 404"),
    ):
        multi30k(tmp_path / "cache", base_url=url)
    assert _leftovers(tmp_path / "cache") == []


def test_multi30k_unreachable_server(tmp_path):
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/raw/"
    with pytest.raises(OSError, match=re.escape(f"could not download train.en.gz from {url}")):
        multi30k(tmp_path / "cache", base_url=url, timeout=5)


@contextlib.contextmanager
def raw_server(answer):
    """A TCP server on 127.0.0.1 whose every connection is handed to ``answer(connection)``
    in its own thread; yields the base URL ``http://127.0.0.1:PORT/raw/``."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_forever():
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:  # the accept timed out, or the listener closed
                continue
            threading.Thread(target=answer, args=(connection, stop), daemon=True).start()

    thread = threading.Thread(target=serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/raw/"
    finally:
        stop.set()
        thread.join()
        listener.close()


def _drip(head: bytes, drop: bytes):
    """A server that sends ``head``, then ``drop`` every 50 ms for up to 60 s: each read gets
    a byte well within any per-read timeout, and the answer never completes."""

    def answer(connection: socket.socket, stop: threading.Event) -> None:
        with connection:
            connection.recv(65536)  # the request
            try:
                connection.sendall(head)
                for _ in range(1200):
                    if stop.wait(0.05):
                        return
                    connection.sendall(drop)
            except OSError:  # the client gave up and closed: the point of the test
                return

    return answer


@pytest.mark.slow  # not in make test-fast: waits on a deadline, or one of several alike
@pytest.mark.parametrize(
    ("head", "drop"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n", b"x"),  # a slow body
        (b"HTTP/1.1 200 OK\r\n", b"X-Slow: y\r\n"),  # headers that never end
    ],
    ids=["body", "headers"],
)
def test_multi30k_download_has_an_overall_deadline(tmp_path, head, drop):
    cache = tmp_path / "cache"
    with raw_server(_drip(head, drop)) as url, pytest.raises(OSError) as error:
        multi30k(cache, base_url=url, timeout=30, deadline=1)
    assert str(error.value) == (
        f"could not download train.en.gz from {url}train.en.gz: not complete within 1 s (the "
        f"download deadline)"
    )
    assert _leftovers(cache) == []


def _redirect_to(location: str):
    def answer(connection: socket.socket, stop: threading.Event) -> None:
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 302 Found\r\nLocation: " + location.encode() + b"\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )

    return answer


def test_multi30k_redirects_within_http_are_followed(tmp_path):
    site = tmp_path / "site" / "moved"
    site.mkdir(parents=True)
    (site / "train.en.gz").write_bytes(gzip.compress(b"not Multi30K\n"))
    with serve(tmp_path / "site") as (target, requested):
        moved = target.replace("/raw/", "/moved/")
        with (
            raw_server(_redirect_to(moved + "train.en.gz")) as url,
            pytest.raises(ValueError, match=r"train\.en\.gz downloaded from .* has sha256"),
        ):
            multi30k(tmp_path / "cache", base_url=url)
    assert requested == ["/moved/train.en.gz"]  # followed, then refused for its digest


def test_multi30k_a_redirect_to_another_scheme_is_refused(tmp_path):
    with (
        raw_server(_redirect_to("file:///etc/passwd")) as url,
        pytest.raises(OSError, match=r"HTTP 302 .*'file:///etc/passwd' is not allowed"),
    ):
        multi30k(tmp_path / "cache", base_url=url)
    assert _leftovers(tmp_path / "cache") == []


@pytest.fixture
def https_url(tmp_path, monkeypatch):
    """An HTTPS server on 127.0.0.1 with a self-signed certificate that this process trusts;
    every request is redirected to ``http://127.0.0.1:1/...``. Yields its base URL."""
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(ssl, "_create_default_https_context", lambda *a, **k: trusting)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:1{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        server.socket = server_side.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield f"https://127.0.0.1:{server.server_address[1]}/raw/"
        finally:
            server.shutdown()
            thread.join()


def test_multi30k_a_redirect_from_https_to_http_is_refused(tmp_path, https_url):
    with pytest.raises(OSError) as error:
        multi30k(tmp_path / "cache", base_url=https_url)
    message = str(error.value)
    assert message.startswith(f"could not download train.en.gz from {https_url}train.en.gz: ")
    assert "refused a redirect from https to http (http://127.0.0.1:1/raw/train.en.gz)" in message
    assert _leftovers(tmp_path / "cache") == []


def _fake_gz_files(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in MULTI30K_SHA256:
        (directory / name).write_bytes(gzip.compress(b"A caption.\n"))


def test_multi30k_a_damaged_cached_file_is_refused(tmp_path):
    cache = tmp_path / "cache"
    _fake_gz_files(cache)
    with pytest.raises(ValueError) as error:
        multi30k(cache, base_url="http://127.0.0.1:1/never-asked/")
    message = str(error.value)
    assert message.startswith(str(cache / "train.en.gz") + ": sha256 ")
    assert MULTI30K_SHA256["train.en.gz"][0] in message and "delete it" in message
    # download=False: the files are the user's own, read as they are
    assert multi30k(cache, download=False)["train"] == [("A caption.", "A caption.")]


@needs_multi30k
def test_multi30k_cached_files_are_hashed_once_per_process(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    shutil.copytree(MULTI30K_DIR, cache)
    monkeypatch.setattr(download, "_VERIFIED", set())  # a fresh process
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(*args):
        hashed.append(1)
        return real(*args)

    monkeypatch.setattr(download.hashlib, "sha256", counting)
    offline = "http://127.0.0.1:1/never-asked/"
    first = multi30k(cache, base_url=offline)
    assert len(hashed) == 6  # each cached file, once
    assert multi30k(cache, base_url=offline).splits == first.splits
    assert len(hashed) == 6  # not again in this process
    data = bytearray((cache / "val.de.gz").read_bytes())
    data[100] ^= 0x01
    (cache / "val.de.gz").write_bytes(bytes(data))  # changed since: hashed again, refused
    with pytest.raises(ValueError, match=r"val\.de\.gz: sha256 .* a damaged or different copy"):
        multi30k(cache, base_url=offline)


def test_parallel_corpus_getitem_rejects_unhashable_split():
    corpus = ParallelCorpus("numbers", "en", "de", {"train": [("one", "eins")]})
    with pytest.raises(KeyError, match=r"has splits \['train'\]"):
        corpus[["train"]]


def test_module_exports():
    assert set(corpora.__all__) <= set(dir(corpora))
