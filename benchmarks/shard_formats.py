"""Token shards on disk: attnlab's format (raw ids + int64 offsets, read through numpy memory
maps) against Hugging Face ``datasets`` (Apache Arrow files), for the same token ids.

For each format, in a fresh child process: the time to write the ids of ``--pairs`` pairs (from
numpy arrays already in memory; Arrow's fastest route, zero-copy ``ListArray`` from the same
arrays, then ``Dataset.save_to_disk``), the size on disk, the resident set after opening, and
the throughput of reading random batches of pairs (``--batch`` pairs, uniformly random: what a
shuffled epoch asks for; the files in the page cache, as they are right after writing). The
readers: ``memmap`` (np.memmap of ids and offsets, one slice per pair), ``TokenShards``
(attnlab.data.shards, what training uses: offsets in memory, ``os.pread`` per pair),
``arrow-numpy`` (``load_from_disk(...).with_format("numpy")[indices]``) and ``arrow-python``
(the default format: lists). Every reader's checksum of the ids it read must agree.

Ratios are against ``memmap`` measured in the same run. ``datasets`` is not a dependency of
attnlab: without it the Arrow rows are skipped with a line saying so
(``pip install datasets`` to measure them).

    python benchmarks/shard_formats.py             # 1,000,000 pairs
    python benchmarks/shard_formats.py --quick     # 100,000 pairs
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "shard_formats.json"
MAX_PAIRS = 1_000_000
VOCAB = 8000
READERS = ("memmap", "tokenshards", "arrow-numpy", "arrow-python")


def rss_mib() -> float:
    """This process's resident set now (VmRSS), MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def have_datasets() -> bool:
    try:
        import datasets  # noqa: F401
    except ImportError:
        return False
    return True


# -- the data ----------------------------------------------------------------------------------


def make_ids(pairs: int, seed: int, work: Path) -> None:
    """Seeded token ids of lengths like the scale benchmark's corpora (1-3 Multi30K sentences a
    line: 6-70 tokens a side, ~30 on average), saved as .npy files."""
    rng = np.random.default_rng(seed)
    for side in ("src", "tgt"):
        sentences = rng.integers(1, 4, pairs)
        lengths = np.zeros(pairs, np.int64)
        for count in (1, 2, 3):
            chosen = sentences >= count
            lengths[chosen] += rng.integers(6, 24, int(chosen.sum()))
        ids = rng.integers(4, VOCAB, int(lengths.sum()), dtype=np.uint16)
        np.save(work / f"{side}_ids.npy", ids)
        np.save(work / f"{side}_lengths.npy", lengths)


def load_ids(work: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    data = {}
    for side in ("src", "tgt"):
        ids = np.load(work / f"{side}_ids.npy")
        lengths = np.load(work / f"{side}_lengths.npy")
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data[side] = (ids, offsets)
    return data


# -- the child's work --------------------------------------------------------------------------


def write_memmap(work: Path, out: Path) -> float:
    from attnlab.data import shardformat

    data = load_ids(work)
    start = time.perf_counter()
    out.mkdir()
    for side, (ids, offsets) in data.items():
        ids.astype("<u2", copy=False).tofile(out / f"{side}.ids")
        offsets.astype(shardformat.OFFSETS_DTYPE, copy=False).tofile(out / f"{side}.offsets")
    pairs = len(data["src"][1]) - 1
    meta = {
        "format": shardformat.FORMAT,
        "version": shardformat.VERSION,
        "pairs": pairs,
        "dtype": "uint16",
        "src_vocab": VOCAB,
        "tgt_vocab": VOCAB,
        "src_max_id": int(data["src"][0].max()),
        "tgt_max_id": int(data["tgt"][0].max()),
        "src_tokens": len(data["src"][0]),
        "tgt_tokens": len(data["tgt"][0]),
        "key": "benchmark",
        "inputs": [],
        "filters": {},
        "dropped": {},
        "tokenizers": {"src": "none", "tgt": "none"},
    }
    (out / shardformat.META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return time.perf_counter() - start


def write_arrow(work: Path, out: Path) -> float:
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    data = load_ids(work)
    start = time.perf_counter()
    columns = {
        side: pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids))
        for side, (ids, offsets) in data.items()
    }
    dataset = datasets.Dataset(InMemoryTable(pa.table(columns)))
    dataset.save_to_disk(str(out))
    return time.perf_counter() - start


def read(reader: str, directory: Path, batches: np.ndarray) -> dict[str, Any]:
    """Open ``directory`` with ``reader``, then read every batch's pairs (both sides); the
    libraries are imported before the resident set is first measured."""
    if reader == "tokenshards":
        import attnlab.data.shards  # noqa: F401
    elif reader.startswith("arrow"):
        import datasets
    before = rss_mib()
    opened_at = time.perf_counter()
    if reader == "memmap":
        maps = {
            side: (
                np.memmap(directory / f"{side}.ids", "<u2", mode="r"),
                np.memmap(directory / f"{side}.offsets", "<i8", mode="r"),
            )
            for side in ("src", "tgt")
        }

        def batch(indices: np.ndarray) -> list[list[np.ndarray]]:
            out = []
            for ids, offsets in maps.values():
                starts, ends = offsets[indices], offsets[indices + 1]
                out.append([ids[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)])
            return out

    elif reader == "tokenshards":
        from attnlab.data.shards import TokenShards

        shards = TokenShards(directory)
        shards.src_lengths, shards.tgt_lengths  # noqa: B018 - read at open, as training does

        def batch(indices: np.ndarray) -> list[list[np.ndarray]]:
            out = []
            for side in ("src", "tgt"):
                ids, sizes = shards.rows(side, indices)
                out.append(np.split(ids, np.cumsum(sizes)[:-1]))
            return out

    else:
        import datasets

        dataset = datasets.load_from_disk(str(directory))
        if reader == "arrow-numpy":
            dataset = dataset.with_format("numpy")

        def batch(indices: np.ndarray) -> list[list[np.ndarray]]:
            rows = dataset[indices.tolist()]
            return [list(rows["src"]), list(rows["tgt"])]

    open_s = time.perf_counter() - opened_at
    after_open = rss_mib()
    checksum = 0
    pairs = 0
    seconds = 0.0
    for indices in batches:
        start = time.perf_counter()
        sides = batch(indices)
        seconds += time.perf_counter() - start
        for side in sides:  # not timed
            checksum += sum(int(np.asarray(row, np.int64).sum()) for row in side)
        pairs += len(indices)
    return {
        "open_s": open_s,
        "rss_before_open_mib": before,
        "rss_after_open_mib": after_open,
        "rss_opened_mib": after_open - before,
        "rss_after_reads_mib": rss_mib(),
        "peak_rss_mib": peak_mib(),
        "pairs_read": pairs,
        "read_s": seconds,
        "pairs_per_s": pairs / seconds,
        "checksum": checksum,
    }


def child(argv: list[str]) -> None:
    operation, what, work, target = argv[0], argv[1], Path(argv[2]), Path(argv[3])
    if operation == "write":
        seconds = (write_memmap if what == "memmap" else write_arrow)(work, target)
        result: dict[str, Any] = {"write_s": seconds, "peak_rss_mib": peak_mib()}
    else:
        batches = np.load(work / "batches.npy")
        result = read(what, target, batches)
    print(json.dumps(result))


def run_child(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"child {argv[:2]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the report --------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=MAX_PAIRS, help="at most 1,000,000")
    parser.add_argument("--quick", action="store_true", help="100,000 pairs, fewer batches")
    parser.add_argument("--batches", type=int, default=1000, help="random batches read")
    parser.add_argument("--batch", type=int, default=64, help="pairs per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="a directory for the files (default: a temp)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args()
    pairs = 100_000 if args.quick else min(args.pairs, MAX_PAIRS)
    batches_n = 200 if args.quick else args.batches
    work = Path(args.work or tempfile.mkdtemp(prefix="attnlab-shard-formats-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        make_ids(pairs, args.seed, work)
        rng = np.random.default_rng(args.seed + 1)
        np.save(work / "batches.npy", rng.integers(0, pairs, (batches_n, args.batch)))
        formats = ["memmap"]
        if have_datasets():
            formats.append("arrow")
        else:
            print("datasets is not installed: Arrow skipped (pip install datasets to measure it)")
        written: dict[str, dict[str, Any]] = {}
        for name in formats:
            target = work / name
            shutil.rmtree(target, ignore_errors=True)
            written[name] = run_child("write", name, str(work), str(target))
            written[name]["disk_bytes"] = disk_bytes(target)
        reads: dict[str, dict[str, Any]] = {}
        for reader in READERS:
            kind = "memmap" if reader in ("memmap", "tokenshards") else "arrow"
            if kind in written:
                reads[reader] = run_child("read", reader, str(work), str(work / kind))
        checksums = {r["checksum"] for r in reads.values()}
        if len(checksums) != 1:
            raise SystemExit(f"the readers read different ids: {reads}")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    base_w, base_r = written["memmap"], reads["memmap"]
    rows = []

    def row(label: str, unit: str, values: dict[str, float], base: float, better: str) -> None:
        rows.append({"measurement": label, "unit": unit, "better": better, "values": values,
                     "ratio_to_memmap": {k: v / base for k, v in values.items()}})  # fmt: skip

    row("write", "s", {k: v["write_s"] for k, v in written.items()}, base_w["write_s"], "lower")
    row("disk size", "MB", {k: v["disk_bytes"] / 1e6 for k, v in written.items()},
        base_w["disk_bytes"] / 1e6, "lower")  # fmt: skip
    row("RSS after opening", "MiB", {k: v["rss_opened_mib"] for k, v in reads.items()},
        max(base_r["rss_opened_mib"], 1e-3), "lower")  # fmt: skip
    row("open", "s", {k: v["open_s"] for k, v in reads.items()}, base_r["open_s"], "lower")
    row("random batches", "pairs/s", {k: v["pairs_per_s"] for k, v in reads.items()},
        base_r["pairs_per_s"], "higher")  # fmt: skip

    print(f"{pairs:,} pairs, {batches_n} random batches of {args.batch} pairs; x: against memmap")
    for r in rows:
        cells = [
            f"{name} {value:,.4g} ({r['ratio_to_memmap'][name]:.2f}x)"
            for name, value in r["values"].items()
        ]
        print(f"{r['measurement']} ({r['unit']}, {r['better']} is better): " + ", ".join(cells))
    report = {
        "benchmark": "shard_formats",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "pairs": pairs,
        "batches": batches_n,
        "batch_pairs": args.batch,
        "python_version": platform.python_version(),
        "numpy_version": np.__version__,
        "datasets_version": _version("datasets"),
        "pyarrow_version": _version("pyarrow"),
        "logical_cpus": os.cpu_count(),
        "written": written,
        "reads": reads,
        "rows": rows,
        "wall_time_s": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
