"""attnlab.data.prepare (the shard writer, its cache), attnlab.data.tokenizer_sample (the
sampled tokenizer) and attnlab.data.textfiles (the line readers under them), on corpora of a
few thousand lines."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnlab.data import progress, shardformat, textfiles, tokenizer_sample, workers
from attnlab.data.clean import CleaningOptions
from attnlab.data.prepare import cached_corpus, prepare_corpus
from attnlab.data.shardformat import META_FILE, SHARD_FILES, is_complete, load_meta, shard_key
from attnlab.data.tokenizer import Tokenizer

WORDS_EN = ["a", "man", "woman", "dog", "two", "men", "are", "in", "the", "park", "with"]
WORDS_EN += ["red", "ball", "running", "street", "small"]
WORDS_DE = ["ein", "mann", "frau", "hund", "zwei", "männer", "sind", "im", "park", "mit"]
WORDS_DE += ["rotem", "ball", "läuft", "straße", "klein", "am"]


def _corpus(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        length = rng.randint(2, 14)
        words = [rng.randrange(len(WORDS_EN)) for _ in range(length)]
        extra = [rng.randrange(len(WORDS_DE)) for _ in range(rng.randint(0, 3))]
        pairs.append(
            (" ".join(WORDS_EN[w] for w in words), " ".join(WORDS_DE[w] for w in words + extra))
        )
    return pairs


def _write(path: Path, lines: list[str], *, gz: bool = False, ending: str = "\n") -> Path:
    data = "".join(line + ending for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[tuple[str, str]]]:
    root = tmp_path_factory.mktemp("corpus")
    pairs = _corpus(3000)
    pairs[5] = ("  padded line  ", "\tgepolstert ")  # stripped like parallel_files
    pairs[9] = ("Zwei Männer <eos> am Strand", "Two men <eos> on the beach")  # text, not ids
    src = _write(root / "train.en", [s for s, _ in pairs])
    tgt = _write(root / "train.de", [t for _, t in pairs])
    return src, tgt, pairs


@pytest.fixture(scope="module")
def tok(corpus: tuple[Path, Path, list[tuple[str, str]]]) -> Tokenizer:
    _, _, pairs = corpus
    return Tokenizer.train([s.strip() for pair in pairs for s in pair], 400)


def _shards(directory: Path) -> tuple[dict, list[list[int]], list[list[int]]]:
    meta = load_meta(directory)
    assert meta is not None
    sides = []
    for side in ("src", "tgt"):
        ids = np.fromfile(directory / f"{side}.ids", meta["dtype"])
        offsets = np.fromfile(directory / f"{side}.offsets", "<i8")
        assert len(offsets) == meta["pairs"] + 1 and offsets[0] == 0
        assert offsets[-1] == len(ids) == meta[f"{side}_tokens"]
        sides.append([ids[a:b].tolist() for a, b in itertools.pairwise(offsets)])
    return meta, sides[0], sides[1]


def _same_files(a: Path, b: Path) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in SHARD_FILES)


# -- the shards ----------------------------------------------------------------------------------


def test_ids_equal_encoding_each_line(corpus, tok, tmp_path: Path, monkeypatch) -> None:
    src, tgt, pairs = corpus
    monkeypatch.setattr(workers, "ENCODE_BATCH", 64)  # a chunk of 700 lines: 11 tokenizer calls
    result = prepare_corpus(
        src, tgt, tok, tok, tmp_path / "s", cleaning=CleaningOptions.off(), workers=1,
        chunk_lines=700,
    )  # fmt: skip
    meta, src_ids, tgt_ids = _shards(result.directory)
    assert src_ids == [tok.encode(s.strip()) for s, _ in pairs]
    assert tgt_ids == [tok.encode(t.strip()) for _, t in pairs]
    assert all(tok.eos_id not in row for row in src_ids)  # "<eos>" in text is characters
    assert meta["pairs"] == result.pairs == 3000 and result.lines == 3000
    assert meta["dtype"] == "uint16" and meta["src_vocab"] == tok.vocab_size
    assert meta["src_max_id"] == max(max(row) for row in src_ids)
    assert meta["tgt_max_id"] == max(max(row) for row in tgt_ids)
    assert meta["tokenizers"] == {"src": tok.fingerprint(), "tgt": tok.fingerprint()}
    assert [i["lines"] for i in meta["inputs"]] == [3000, 3000]
    assert meta["inputs"][0]["sha256"] == textfiles.sha256_file(src)
    assert meta["inputs"][0]["path"] == os.path.abspath(src)
    assert meta["key"] == shard_key(
        [textfiles.sha256_file(src), textfiles.sha256_file(tgt)],
        [tok.fingerprint()] * 2,
        CleaningOptions.off(),
    )
    assert sorted(p.name for p in result.directory.iterdir()) == sorted(SHARD_FILES)
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no partial left beside it


def test_default_cleaning_keeps_what_the_filters_keep(corpus, tok, tmp_path: Path) -> None:
    src, tgt, pairs = corpus
    result = prepare_corpus(src, tgt, tok, tok, tmp_path / "s", workers=1, chunk_lines=500)
    _, src_ids, _ = _shards(result.directory)
    expected, seen = [], set()
    for s, t in pairs:
        s, t = s.strip(), t.strip()
        a, b = len(tok.encode(s)), len(tok.encode(t))
        if s and t and s != t and max(a, b) <= 250 and max(a, b) <= 1.5 * min(a, b):
            if (s, t) not in seen:
                expected.append(tok.encode(s))
            seen.add((s, t))
    assert src_ids == expected and result.pairs + sum(result.dropped.values()) == 3000


class BigVocab:
    """A tokenizer of 70,000 ids: one id per word, above 65,535."""

    vocab_size = 70_000

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[65_536 + len(w) * 7 + ord(w[0]) % 7 for w in t.split()] for t in texts]

    def fingerprint(self) -> str:
        return "big"


def test_uint32_above_65536_ids(corpus, tok, tmp_path: Path) -> None:
    src, tgt, pairs = corpus
    big = BigVocab()
    off = CleaningOptions.off()
    result = prepare_corpus(src, tgt, big, tok, tmp_path / "s", cleaning=off, workers=1)
    meta, src_ids, tgt_ids = _shards(result.directory)
    assert meta["dtype"] == "uint32" and meta["src_vocab"] == 70_000
    assert src_ids == big.encode_batch([s.strip() for s, _ in pairs])
    assert tgt_ids == [tok.encode(t.strip()) for _, t in pairs]
    assert os.path.getsize(result.directory / "src.ids") == 4 * meta["src_tokens"]
    assert (
        shardformat.id_dtype(65_536, 100) == "uint16"
        and shardformat.id_dtype(100, 65_537) == "uint32"
    )


def test_gzip_input_equals_plain(corpus, tok, tmp_path: Path) -> None:
    src, tgt, pairs = corpus
    plain = prepare_corpus(src, tgt, tok, tok, tmp_path / "plain", workers=1)
    # gzip told by its magic bytes, not by its name
    gz_src = _write(tmp_path / "train.en.data", [s for s, _ in pairs], gz=True)
    gz_tgt = _write(tmp_path / "train.de.gz", [t for _, t in pairs], gz=True)
    packed = prepare_corpus(gz_src, gz_tgt, tok, tok, tmp_path / "gz", workers=1)
    for name in SHARD_FILES[:-1]:
        assert (plain.directory / name).read_bytes() == (packed.directory / name).read_bytes()
    assert packed.meta["inputs"][0]["sha256"] == textfiles.sha256_file(gz_src)
    assert packed.meta["dropped"] == plain.meta["dropped"]


def test_mismatched_lines_fail_before_any_work(tmp_path: Path) -> None:
    src = _write(tmp_path / "a.en", ["one", "two", "three"])
    tgt = _write(tmp_path / "a.de", ["eins", "zwei"])

    class Counting:
        vocab_size = 100
        calls = 0

        def encode_batch(self, texts):
            Counting.calls += 1
            return [[5] for _ in texts]

        def fingerprint(self):
            return "c"

    tok = Counting()
    with pytest.raises(ValueError) as error:
        prepare_corpus(src, tgt, tok, tok, tmp_path / "s", name="[task] train_src, train_tgt")
    assert str(error.value) == (
        f"[task] train_src, train_tgt: the files differ in length: {src} has 3 lines, {tgt} has 2"
    )
    with pytest.raises(ValueError, match=r"^train: .*a\.fr: no such file$"):
        prepare_corpus(src, tmp_path / "a.fr", tok, tok, tmp_path / "s", workers=1)
    with pytest.raises(ValueError, match=r"^train: .*: is a directory"):
        prepare_corpus(src, tmp_path, tok, tok, tmp_path / "s", workers=1)
    assert Counting.calls == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.de", "a.en"]


def test_bad_text_is_named_before_any_work(tmp_path: Path, tok) -> None:
    src = _write(tmp_path / "a.en", ["one", "two", "three"])
    tgt = tmp_path / "a.de"
    tgt.write_bytes(b"eins\nzw\xffei\ndrei\n")
    with pytest.raises(ValueError) as error:
        prepare_corpus(src, tgt, tok, tok, tmp_path / "s", workers=1)
    assert str(error.value) == f"train: {tgt}: line 2: not UTF-8 (byte 0xff at column 3)"
    bad = tmp_path / "b.gz"
    bad.write_bytes(b"\x1f\x8b not gzip at all")
    with pytest.raises(ValueError, match=r"b\.gz: not a valid gzip file"):
        prepare_corpus(src, bad, tok, tok, tmp_path / "s", workers=1)
    empty = _write(tmp_path / "e", [])
    with pytest.raises(ValueError, match=r"e: the file is empty$"):
        prepare_corpus(empty, empty, tok, tok, tmp_path / "s", workers=1)
    assert not (tmp_path / "s").exists()


# -- the cache -----------------------------------------------------------------------------------


class CountingTokenizer:
    """A tokenizer that counts the texts it encodes."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner, self.encoded = inner, 0
        self.vocab_size = inner.vocab_size

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.encoded += len(texts)
        return self.inner.encode_batch(texts)

    def fingerprint(self) -> str:
        return self.inner.fingerprint()


def test_cache_hit_returns_the_directory_without_encoding(corpus, tok, tmp_path: Path) -> None:
    src, tgt, _ = corpus
    counting = CountingTokenizer(tok)
    first = cached_corpus(src, tgt, counting, counting, cache_dir=tmp_path, workers=1)
    assert not first.cached and counting.encoded >= first.pairs * 2 > 0
    assert first.directory == tmp_path / first.meta["key"]
    encoded = counting.encoded
    again = cached_corpus(src, tgt, counting, counting, cache_dir=tmp_path, workers=1)
    assert again.cached and again.directory == first.directory and counting.encoded == encoded
    assert again.pairs == first.pairs and again.summary == first.summary
    # another option is another key, another directory
    other = cached_corpus(
        src, tgt, counting, counting, cache_dir=tmp_path, workers=1,
        cleaning=CleaningOptions(max_ratio=2.0),
    )  # fmt: skip
    assert not other.cached and other.directory != first.directory
    assert counting.encoded > encoded


def test_cache_dir_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "c"))
    assert shardformat.default_cache_dir() == tmp_path / "c" / "shards"
    monkeypatch.delenv("ATTNLAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert shardformat.default_cache_dir() == tmp_path / "x" / "attnlab" / "shards"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert shardformat.default_cache_dir() == Path.home() / ".cache" / "attnlab" / "shards"


# -- atomicity -----------------------------------------------------------------------------------

_KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from attnlab.data.prepare import prepare_corpus
    from attnlab.data.tokenizer import Tokenizer


    def die(done, total, rate, eta):
        os.kill(os.getpid(), signal.SIGKILL)

    if __name__ == "__main__":
        src, tgt, tok, out, workers = sys.argv[1:]
        tok = Tokenizer.load(tok)
        prepare_corpus(src, tgt, tok, tok, out, workers=int(workers), chunk_lines=400, progress=die)
    """
)


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_killed_preparation_is_never_complete(corpus, tok, tmp_path: Path, workers: int) -> None:
    src, tgt, _ = corpus
    reference = prepare_corpus(src, tgt, tok, tok, tmp_path / "reference", workers=1)
    tok.save(tmp_path / "tok.json")
    root = tmp_path / "runs"
    root.mkdir()
    out = root / "train"
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_RUN, encoding="utf-8")
    args = [sys.executable, str(script), str(src), str(tgt), str(tmp_path / "tok.json"), str(out)]
    done = subprocess.run([*args, str(workers)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    left = list(root.iterdir())
    assert [p.name.startswith("train.partial-") for p in left] == [True]
    assert not out.exists() and not is_complete(left[0]) and not is_complete(out)
    assert not (left[0] / META_FILE).exists()
    again = prepare_corpus(src, tgt, tok, tok, out, workers=1)
    assert [p.name for p in root.iterdir()] == ["train"]  # the dead run's partial removed
    assert _same_files(again.directory, reference.directory)


def test_partial_of_a_live_process_is_kept(corpus, tok, tmp_path: Path) -> None:
    src, tgt, _ = corpus
    mine = tmp_path / f"s.partial-{os.getpid()}-00ff"
    mine.mkdir()
    parent = tmp_path / f"s.partial-{os.getppid()}-abcd"
    parent.mkdir()
    prepare_corpus(src, tgt, tok, tok, tmp_path / "s", workers=1)
    assert mine.is_dir() and parent.is_dir()


def test_replaces_an_existing_directory(corpus, tok, tmp_path: Path) -> None:
    src, tgt, _ = corpus
    out = tmp_path / "s"
    out.mkdir()
    (out / "junk").write_text("x")
    result = prepare_corpus(src, tgt, tok, tok, out, workers=1)
    assert sorted(p.name for p in out.iterdir()) == sorted(SHARD_FILES)
    assert is_complete(out) and result.directory == out


def test_meta_of_another_format_is_refused(tmp_path: Path) -> None:
    assert load_meta(tmp_path) is None and not is_complete(tmp_path / "nothing")
    (tmp_path / META_FILE).write_text(json.dumps({"format": "attnlab-shards", "version": 9}))
    with pytest.raises(ValueError, match="shard format version 9"):
        load_meta(tmp_path)
    assert not is_complete(tmp_path)


@pytest.mark.slow
def test_two_workers_write_the_same_bytes(corpus, tok, tmp_path: Path) -> None:
    src, tgt, _ = corpus
    one = prepare_corpus(src, tgt, tok, tok, tmp_path / "one", workers=1, chunk_lines=300)
    two = prepare_corpus(src, tgt, tok, tok, tmp_path / "two", workers=2, chunk_lines=300)
    assert _same_files(one.directory, two.directory)
    assert one.pairs == two.pairs > 0


def test_a_preparation_worker_loads_no_torch(corpus, tok, tmp_path: Path) -> None:
    """A worker is a spawned process: it imports the main module (the installed ``attnlab``
    script imports attnlab.cli), the worker module, and loads the tokenizers. None of it may
    load torch or the models: each worker would hold its own ~150 MB copy (issue 48's
    preparation memory). Asked of the pool's own workers, after they encoded a chunk."""
    src, tgt, _ = corpus
    tok.save(tmp_path / "tokenizer.json")
    script = tmp_path / "attnlab_script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json
            import sys

            from attnlab.cli import main  # as the installed attnlab script does

            if __name__ == "__main__":
                from attnlab.data import workers
                from attnlab.data.clean import CleaningOptions
                from attnlab.data.tokenizer import load_tokenizer

                tok = load_tokenizer({str(tmp_path / "tokenizer.json")!r})
                config = {{
                    "filters": CleaningOptions().to_dict(),
                    "dtype": "uint16",
                    "paths": ({str(src)!r}, {str(tgt)!r}),
                    "chunk_lines": 2,
                }}
                ask = "sorted(m for m in __import__('sys').modules if m == 'torch' or "
                ask += "m.startswith(('attnlab.models', 'attnlab.nn', 'attnlab.train')))"
                with workers.encoding_pool(tok, tok, config, 2) as pool:
                    chunk = pool.submit(workers._work, 0, b"a man\\nzwei\\n", b"ein mann\\ntwo\\n")
                    loaded = [pool.submit(eval, ask) for _ in range(4)]
                    print(json.dumps([chunk.result().src_lengths.tolist(),
                                      [f.result() for f in loaded]]))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=True
    )
    lengths, loaded = json.loads(done.stdout)
    assert lengths == [len(tok.encode("a man")), len(tok.encode("zwei"))]  # it did encode
    assert loaded == [[]] * 4, loaded


def test_progress(corpus, tok, tmp_path: Path) -> None:
    src, tgt, _ = corpus
    calls = []
    prepare_corpus(
        src, tgt, tok, tok, tmp_path / "s", workers=1, chunk_lines=1000,
        progress=lambda *args: calls.append(args),
    )  # fmt: skip
    assert [(done, total) for done, total, _, _ in calls] == [(n, 3000) for n in (1000, 2000, 3000)]
    assert all(rate > 0 for _, _, rate, _ in calls) and calls[-1][3] == 0
    line = progress.format_progress("train", 1_200_000, 4_500_000, 41_000.4, 80.2)
    assert line == (
        "preparing train: 1,200,000 / 4,500,000 lines (26.7%), 41,000 lines/s, ETA 1 min 20 s"
    )
    assert progress.format_progress("valid", 5, 5, 10, 0).endswith("(100.0%), 10 lines/s, ETA 0 s")
    assert progress.format_progress("t", 1, 9, 1, 7500).endswith("ETA 2 h 05 min")


# -- the tokenizer on a sample -------------------------------------------------------------------


def test_tokenizer_on_a_sample(corpus, tok, tmp_path: Path) -> None:
    src, tgt, pairs = corpus
    # a sample as large as the corpus: the tokenizer a job trains on the corpus in memory
    whole, same = tokenizer_sample.train_tokenizer_on_sample(src, tgt, 400, sample_size=5000)
    assert whole is same and whole.fingerprint() == tok.fingerprint()
    a, _ = tokenizer_sample.train_tokenizer_on_sample(src, tgt, 400, sample_size=300, seed=1)
    b, _ = tokenizer_sample.train_tokenizer_on_sample(src, tgt, 400, sample_size=300, seed=1)
    assert a.fingerprint() == b.fingerprint() != tok.fingerprint()
    chosen = textfiles.reservoir_sample(src, k=300, seed=1)
    sample = [side.strip() for i in chosen for side in pairs[i]]
    assert a.fingerprint() == Tokenizer.train(sample, 400).fingerprint()
    s, t = tokenizer_sample.train_tokenizer_on_sample(src, tgt, 300, joint=False, sample_size=300)
    assert s is not t and s.encode("two men") != [] and t.encode("zwei männer") != []
    lm, lm2 = tokenizer_sample.train_tokenizer_on_sample(src, None, 300, sample_size=300)
    assert lm is lm2
    with pytest.raises(ValueError, match="sample_size: expected a positive int, got 0"):
        tokenizer_sample.train_tokenizer_on_sample(src, tgt, 400, sample_size=0)


# -- textfiles -----------------------------------------------------------------------------------


def test_lines_plain_gzip_crlf_bom(tmp_path: Path) -> None:
    lines = ["first", "", "zwei Männer", "  spaced  ", "tab\tinside", "sep\u2028kept", "last"]
    plain = _write(tmp_path / "p", lines)
    crlf = _write(tmp_path / "c", lines, ending="\r\n")
    gz = _write(tmp_path / "g", lines, gz=True)
    bom = tmp_path / "b"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes()[:-1])  # no final newline
    for path in (plain, crlf, gz, bom):
        assert list(textfiles.iter_lines(path)) == lines, path
        assert textfiles.count_lines(path) == len(lines), path
    assert textfiles.is_gzip(gz) and not textfiles.is_gzip(plain)
    empty = _write(tmp_path / "e", [])
    assert textfiles.count_lines(empty) == 0 and list(textfiles.iter_lines(empty)) == []
    only_bom = tmp_path / "ob"
    only_bom.write_bytes(b"\xef\xbb\xbf")
    assert textfiles.count_lines(only_bom) == 0 and list(textfiles.iter_lines(only_bom)) == []
    info = textfiles.scan_file(gz)
    assert info.sha256 == textfiles.sha256_file(gz) and info.bytes == gz.stat().st_size
    assert info.lines == len(lines)


def test_line_chunks_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textfiles, "BLOCK_BYTES", 64)  # many blocks, lines across them
    lines = [f"line {i} " + "x" * (i % 23) for i in range(500)]
    for ending in ("\n", ""):
        path = tmp_path / "f"
        path.write_bytes(("\n".join(lines) + ending).encode())
        for size in (1, 7, 100, 499, 500, 1000):
            chunks = list(textfiles.line_chunks(path, size))
            assert b"".join(chunks) == path.read_bytes()
            counts = [len(textfiles.decode_lines(c)) for c in chunks]
            assert counts == [size] * (500 // size) + ([500 % size] if 500 % size else [])
        assert textfiles.count_lines(path) == 500
        assert list(textfiles.iter_lines(path)) == lines


def test_utf8_error_names_file_line_and_column(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(textfiles, "BLOCK_BYTES", 16)
    path = tmp_path / "bad.de"
    path.write_bytes(b"eins\nzwei\ndrei und vier\nf\xc3nf\nsechs\n")
    message = f"{path}: line 4: not UTF-8 (byte 0xc3 at column 2)"
    with pytest.raises(ValueError) as error:
        list(textfiles.iter_lines(path))
    assert str(error.value) == message
    with pytest.raises(ValueError) as error:
        textfiles.scan_file(path, utf8=True)
    assert str(error.value) == message
    assert textfiles.scan_file(path).lines == 5  # counting does not decode


def test_check_parallel(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", ["x", "y"])
    b = _write(tmp_path / "b.gz", ["u", "v"], gz=True)
    src, tgt = textfiles.check_parallel(a, b, "valid")
    assert (src.lines, tgt.lines) == (2, 2)
    c = _write(tmp_path / "c", ["u"])
    with pytest.raises(ValueError) as error:
        textfiles.check_parallel(a, c, "[task] valid_src, valid_tgt")
    assert str(error.value) == (
        f"[task] valid_src, valid_tgt: the files differ in length: {a} has 2 lines, {c} has 1"
    )
    locked = _write(tmp_path / "locked", ["x", "y"])
    locked.chmod(0)
    try:
        if not os.access(locked, os.R_OK):  # root reads anything
            with pytest.raises(ValueError, match=r"^valid: .*locked: cannot be read"):
                textfiles.check_parallel(a, locked, "valid")
    finally:
        locked.chmod(0o644)


def test_reservoir_sample_is_seeded_bounded_and_uniform(tmp_path: Path, monkeypatch) -> None:
    lines = [f"l{i}" for i in range(1000)]
    path = _write(tmp_path / "f", lines)
    first = textfiles.reservoir_sample(path, k=50, seed=7)
    assert isinstance(first, np.ndarray) and len(first) == 50 and len(set(first.tolist())) == 50
    assert np.all(np.diff(first) > 0) and first.max() < 1000
    assert np.array_equal(first, textfiles.reservoir_sample(path, k=50, seed=7))
    assert not np.array_equal(first, textfiles.reservoir_sample(path, k=50, seed=8))
    assert textfiles.reservoir_sample(path, k=50, seed=7, lines=True) == [lines[i] for i in first]
    monkeypatch.setattr(textfiles, "BLOCK_BYTES", 32)  # blocks do not change the sample
    assert np.array_equal(first, textfiles.reservoir_sample(path, k=50, seed=7))
    assert textfiles.reservoir_sample(path, k=50, seed=7, lines=True) == [lines[i] for i in first]
    monkeypatch.undo()
    assert textfiles.reservoir_sample(path, k=5000).tolist() == list(range(1000))
    # two files are one stream of lines
    other = _write(tmp_path / "g", ["m0", "m1"])
    both = textfiles.reservoir_sample(path, other, k=2000, lines=True)
    assert both == [*lines, "m0", "m1"]
    # uniform: every line about equally often over many seeds
    small = _write(tmp_path / "s", [str(i) for i in range(20)])
    counts = np.zeros(20)
    for seed in range(1500):
        counts[textfiles.reservoir_sample(small, k=5, seed=seed)] += 1
    assert counts.sum() == 7500 and np.all(np.abs(counts - 375) < 75)


def test_chunked_prepare_after_block_changes(corpus, tok, tmp_path: Path, monkeypatch) -> None:
    """Small read blocks (chunks cut inside blocks and across them) give the same shards."""
    src, tgt, _ = corpus
    reference = prepare_corpus(src, tgt, tok, tok, tmp_path / "a", workers=1, chunk_lines=333)
    monkeypatch.setattr(textfiles, "BLOCK_BYTES", 1000)
    small = prepare_corpus(src, tgt, tok, tok, tmp_path / "b", workers=1, chunk_lines=333)
    assert _same_files(reference.directory, small.directory)
    shutil.rmtree(tmp_path / "a")


def test_an_unchanged_file_is_scanned_once(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "f", ["a", "b", "c"])
    reads = []
    scan = textfiles._scan
    monkeypatch.setattr(textfiles, "_scan", lambda p, **kw: reads.append(kw) or scan(p, **kw))
    assert textfiles.count_lines(path) == 3  # no digest
    first = textfiles.scan_file(path)  # the digest: read again
    assert textfiles.scan_file(path) == first and textfiles.count_lines(path) == 3
    assert textfiles.check_parallel(path, path, "x", utf8=False) == (first, first)
    assert len(reads) == 2
    textfiles.scan_file(path, utf8=True)  # not checked yet: read again
    assert textfiles.scan_file(path, digest=False, utf8=True).lines == 3 and len(reads) == 3
    os.utime(path, ns=(1, 1))  # changed (as far as the file system says)
    _write(path, ["a", "b", "c", "d"])
    assert textfiles.count_lines(path) == 4 and len(reads) == 4


# -- what a later process remembers: the files' digests ------------------------------------------


def _old(path: Path, seconds: int = 1_000_000_000) -> Path:
    """``path`` with a modification time long past (a file just written is not remembered:
    a write in the same clock tick, of the same size, would go unseen)."""
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))
    return path


def test_a_later_process_does_not_read_an_unchanged_file(tmp_path: Path, monkeypatch) -> None:
    """The digests cache (path, device, inode, size, mtime in ns -> digest and lines) spares
    a second process the read; a touched or rewritten file, and ``verify``, are read again."""
    path = _old(_write(tmp_path / "f.en", ["a", "b", "c"]))
    cache = tmp_path / "cache"
    reads: list[Path] = []
    scan = textfiles._scan
    monkeypatch.setattr(textfiles, "_scan", lambda p, **kw: reads.append(p) or scan(p, **kw))
    monkeypatch.setattr(textfiles, "_SCANS", {})  # a fresh process
    first = textfiles.scan_file(path, cache_dir=cache)
    assert len(reads) == 1 and first.lines == 3 and first.sha256 == textfiles.sha256_file(path)
    stored = json.loads((cache / textfiles.DIGESTS_FILE).read_text(encoding="utf-8"))
    assert stored["format"] == "attnlab-file-digests" and len(stored["files"]) == 1
    monkeypatch.setattr(textfiles, "_SCANS", {})  # the next process: not read again
    assert textfiles.scan_file(path, cache_dir=cache) == first and len(reads) == 1
    assert textfiles.count_lines(path) == 3 and len(reads) == 1
    monkeypatch.setattr(textfiles, "_SCANS", {})
    assert textfiles.scan_file(path, cache_dir=cache, utf8=True) == first  # not checked yet
    assert len(reads) == 2
    monkeypatch.setattr(textfiles, "_SCANS", {})
    assert textfiles.check_parallel(path, path, "x", cache_dir=cache) == (first, first)
    assert len(reads) == 2  # UTF-8 checked and remembered
    monkeypatch.setattr(textfiles, "_SCANS", {})
    textfiles.scan_file(path, cache_dir=cache, verify=True)  # --verify-data
    assert len(reads) == 3
    monkeypatch.setattr(textfiles, "_SCANS", {})
    _old(path, 1_000_000_001)  # touched: the same bytes, read again for their digest
    assert textfiles.scan_file(path, cache_dir=cache) == first and len(reads) == 4
    _write(path, ["a", "b", "d"])  # rewritten in place, the same size: a new mtime
    monkeypatch.setattr(textfiles, "_SCANS", {})
    changed = textfiles.scan_file(path, cache_dir=cache)
    assert len(reads) == 5 and changed.sha256 != first.sha256
    monkeypatch.setattr(textfiles, "_SCANS", {})  # just written: not remembered
    assert textfiles.scan_file(path, cache_dir=cache) == changed and len(reads) == 6
    _old(path, 1_000_000_002)
    monkeypatch.setattr(textfiles, "_SCANS", {})
    textfiles.scan_file(path, cache_dir=cache)  # remembered as it is now
    assert len(reads) == 7
    other = _old(_write(tmp_path / "g.en", ["a", "b", "c"]), 1_000_000_002)
    os.replace(other, path)  # another file (inode) in its place: size and mtime alike
    monkeypatch.setattr(textfiles, "_SCANS", {})
    assert textfiles.scan_file(path, cache_dir=cache).sha256 == first.sha256
    assert len(reads) == 8


def test_a_damaged_digests_cache_is_read_as_empty(tmp_path: Path, monkeypatch) -> None:
    path = _old(_write(tmp_path / "f.en", ["a", "b"]))
    cache = tmp_path / "cache"
    cache.mkdir()
    reads: list[Path] = []
    scan = textfiles._scan
    monkeypatch.setattr(textfiles, "_scan", lambda p, **kw: reads.append(p) or scan(p, **kw))
    for damaged in ("{not json", '{"format": "other", "files": {}}', "[1, 2]", "\xff"):
        (cache / textfiles.DIGESTS_FILE).write_text(damaged, encoding="latin-1")
        monkeypatch.setattr(textfiles, "_SCANS", {})
        assert textfiles.scan_file(path, cache_dir=cache).lines == 2
    assert len(reads) == 4
    entry = json.loads((cache / textfiles.DIGESTS_FILE).read_text())["files"][str(path)]
    entry["sha256"] = "short"  # a malformed entry: read again, then written right
    data = {"format": "attnlab-file-digests", "version": 1, "files": {str(path): entry}}
    (cache / textfiles.DIGESTS_FILE).write_text(json.dumps(data))
    monkeypatch.setattr(textfiles, "_SCANS", {})
    assert textfiles.scan_file(path, cache_dir=cache).sha256 == textfiles.sha256_file(path)
    assert len(reads) == 5


def test_cached_corpus_remembers_the_digests(corpus, tok, tmp_path: Path, monkeypatch) -> None:
    src, tgt, _ = corpus
    src, tgt = (Path(shutil.copy(p, tmp_path / p.name)) for p in (src, tgt))
    _old(src), _old(tgt)
    reads: list[Path] = []
    scan = textfiles._scan
    monkeypatch.setattr(textfiles, "_scan", lambda p, **kw: reads.append(p) or scan(p, **kw))
    monkeypatch.setattr(textfiles, "_SCANS", {})
    first = cached_corpus(src, tgt, tok, tok, cache_dir=tmp_path / "cache", workers=1)
    assert not first.cached and reads
    reads.clear()
    monkeypatch.setattr(textfiles, "_SCANS", {})  # a second start: the shards, no read
    again = cached_corpus(src, tgt, tok, tok, cache_dir=tmp_path / "cache", workers=1)
    assert again.cached and again.directory == first.directory and reads == []


# -- waiting for another process's preparation ----------------------------------------------------


def test_another_rank_waits_for_the_preparation(corpus, tok, tmp_path: Path, monkeypatch) -> None:
    """``wait``: nothing prepared here; the call returns once the first process has made
    the directory, however long that takes (no deadline), and says why it waits."""
    import threading

    src, tgt, _ = corpus
    monkeypatch.setattr(progress, "WAIT_POLL_S", 0.01)
    heard: list[str] = []
    waiting = threading.Event()

    def say(line: str) -> None:
        heard.append(line)
        waiting.set()

    found: list = []
    other = threading.Thread(
        target=lambda: found.append(
            cached_corpus(src, tgt, tok, tok, cache_dir=tmp_path, workers=1, wait=say)
        )
    )
    other.start()
    assert waiting.wait(timeout=120), "the waiting rank said nothing"
    assert not found and other.is_alive()
    made = cached_corpus(src, tgt, tok, tok, cache_dir=tmp_path, workers=1)
    other.join(timeout=120)
    assert not other.is_alive(), "the waiting rank did not see the prepared shards"
    assert found[0].cached and found[0].directory == made.directory and not made.cached
    assert heard[0].startswith("waiting for rank 0 to prepare the shards of train in ")
    assert "without a time limit" in heard[0]


# -- the tokenizers' sample follows the mixture ---------------------------------------------------


def test_the_tokenizer_sample_follows_the_weights(tmp_path: Path) -> None:
    """Two corpora of distinct words: the sample takes each one's share of an epoch (its
    weight), not its share of the lines; a one-stream sample without weights."""
    big = [f"big{i % 50} word{i % 7}" for i in range(2000)]
    small = [f"small{i % 40} word{i % 5}" for i in range(200)]
    files = [_write(tmp_path / f"{name}.{side}", lines) for name, lines in
             (("big", big), ("small", small)) for side in ("en", "de")]  # fmt: skip
    srcs, tgts = [files[0], files[2]], [files[1], files[3]]
    # Weights 1 : 4: the small corpus (200 lines) once, 50 of the big one (2,000 lines).
    assert tokenizer_sample.sample_counts(srcs, 10_000, weights=[1.0, 4.0]) == [50, 200]
    assert tokenizer_sample.sample_counts(srcs, 125, weights=[1.0, 4.0]) == [25, 100]  # scaled down
    assert tokenizer_sample.sample_counts(srcs, 10_000, temperature=1.0) == [2000, 200]
    assert tokenizer_sample.sample_counts(srcs, 10_000) is None
    assert tokenizer_sample.sample_counts(srcs[:1], 10_000, weights=[1.0]) is None
    weighted, _ = tokenizer_sample.train_tokenizer_on_sample(
        srcs, tgts, 300, sample_size=125, weights=[1.0, 4.0], min_frequency=1
    )
    again, _ = tokenizer_sample.train_tokenizer_on_sample(
        srcs, tgts, 300, sample_size=125, weights=[1.0, 4.0], min_frequency=1
    )
    assert weighted.fingerprint() == again.fingerprint()
    plain, _ = tokenizer_sample.train_tokenizer_on_sample(
        srcs, tgts, 300, sample_size=125, min_frequency=1
    )
    assert plain.fingerprint() != weighted.fingerprint()
    # What it learned from: 25 big lines and 100 small ones (each side), seeded per corpus.
    picks = [
        textfiles.reservoir_sample(path, k=k, seed=tokenizer_sample._corpus_seed(0, i), lines=True)
        for i, (path, k) in enumerate(zip(srcs, [25, 100], strict=True))
    ]
    assert [len(p) for p in picks] == [25, 100]
    sample = [line for p, tgt in zip(picks, tgts, strict=True) for line in p for _ in (0, 1)]
    assert sum(line.startswith("small") for line in sample) == 4 * sum(
        line.startswith("big") for line in sample
    )
    expected = Tokenizer.train(sample, 300, min_frequency=1)
    assert weighted.fingerprint() == expected.fingerprint()
