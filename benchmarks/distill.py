"""Ensembles and distillation, measured: BLEU against tokens/s for a recipe model, the teachers'
ensemble and each distilled student, on attnlab's torch and ctranslate2 engines (one model: an
ensemble is torch's), float32 and int8, at batch 1 and batch 32; the issue's goals judged on
those figures; a table and a picture.

What it reads (``make distill-multi30k`` trains them; a rerun of that target trains only what is
missing, then runs this script):

* the teachers: ``RUNS/multi30k-seeds/seed*/model`` (the recipe with seeds 0, 1, 2);
* the students: ``RUNS/multi30k-student*/model`` (trained with ``[distill]`` on the teachers).

``--teachers DIR ...`` and ``--students DIR ...`` name them instead.

Quality is decoded in this process (no timing): cased detokenised sacreBLEU with its signature,
and the literature's lowercased, Moses-tokenised BLEU, on the validation split (where choices are
made) and the test split (read after them). Each model decodes as its directory says (the
teachers: beam 4 with their recipe's alpha; the students: greedy); the ensemble as its first
teacher. The goals are judged on the students chosen on validation: of the fast ones (a
shallower decoder than encoder) and of those of the recipe's shape, each the best there; the
fast one's batch-1 speed against CTranslate2 running the recipe model with beam 4 is judged in
attnlab's torch engine (issue 45) and on its ctranslate2 engine (issue 59). How
far each score would move with other sentences of the same kind: a paired bootstrap
(sacreBLEU's, 1,000 resamples) of every system against the recipe model and against the
ensemble, on both splits (the float32 translations are kept in the workdir).

Beside the table: each teacher alone on both splits, their mean and standard deviation; every
system's brevity penalty and n-gram precisions, and its BLEU with the recipe model's and the
ensemble's translations as references (how closely it imitates them); what beam 4 adds to the
students that decode greedily, on validation.

The blind sets (``--blind DIR``, default ``$ATTNLAB_MULTI30K_BLIND``): each ``SET.en.gz`` of DIR
(sources only, no references) is translated by every teacher, their ensemble and every student
(attnlab, float32, each decoding as its directory says) into ``--blind-out``
(``benchmarks/results/blind/SYSTEM.SET.de``), one line per source line. They are translated,
never scored: nothing here trains, tunes, chooses or filters on them.

Speed: every measurement runs alone in a child process (``--worker``), with 1 and with 2 torch /
CTranslate2 threads, after a warm-up; tokens/s counts the generated tokens of the first
``--speed-sentences`` validation sources, translated in their file's order in batches of 1 or 32
(a batch sorted by length inside, as the Translator sorts); each figure is the best of
``--repeats`` (3) timed passes, with each pass's CPU seconds (at 1 thread, CPU well under the
wall clock means another job had the core). Before each measurement it waits until other jobs
use at most 15% of the CPU (``--quiet-wait``: 30 minutes in all, for the whole run), and records
the share. The table reports the best of the two thread counts; the engines' ratios
(``like_threads``) compare them at the same thread count. Never run it beside another job: two
2-thread processes on 2 cores slow each other about 5x.

Run::

    .venv/bin/python benchmarks/distill.py --runs runs            # after make distill-multi30k
    .venv/bin/python benchmarks/distill.py --quick --teachers A B --students S   # a smoke run
    .venv/bin/python benchmarks/distill.py --no-speed --out /tmp/scores.json     # scores only
    .venv/bin/python benchmarks/distill.py --profile    # add a batch-1 profile to the report
    .venv/bin/python benchmarks/distill.py --markdown   # the report's tables, for the docs

``--profile`` runs the recipe model and the chosen fast student one sentence at a time in
attnlab under torch's profiler (1 thread): the time a token takes, the aten calls it makes and
the share of the time inside them, beside CTranslate2's time a token from the report's speed
rows. It says where batch-1 decoding goes when a small model is slower than CTranslate2.

Scores are kept in the workdir, keyed by a digest of the models' files and the options, so a
later run (the timing, once the students are trained) reads them back (``--fresh``: score
again).

Writes ``--out`` (JSON: every figure, the goals, the machine) and ``--picture`` (PNG).
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "distill.json"
DEFAULT_PICTURE = HERE.parent / "docs" / "img" / "distill.png"
DEFAULT_BLIND = HERE / "results" / "blind"

#: The issue's goals (Multi30K en->de).
ENSEMBLE_GAIN = 0.8  # validation BLEU over the teachers' mean
STUDENT_CASED, STUDENT_TOKENIZED = 40.5, 41.02  # test_2016, one distilled student of the recipe
FAST_BLEU_GAP = 0.5  # the fast student's greedy BLEU within this of one recipe model's beam 4
FAST_OVER_TEACHER, FAST_OVER_CT2 = 2.5, 1.5  # batch-1 tokens/s ratios
#: Issue 59's goals: the fast student through `attnlab translate --engine ctranslate2`.
CT2_ENGINE = " on attnlab's ctranslate2 engine"
#: The report's choices on validation: its key, and whether of the fast students (else of
#: those of the recipe's shape).
CHOICES = {"recipe_student": False, "fast_student": True}


# -- what there is to measure ------------------------------------------------------------------


def discover(runs: Path) -> tuple[list[Path], list[Path]]:
    """The teachers' and the students' model directories under ``runs``."""
    teachers = sorted(p / "model" for p in (runs / "multi30k-seeds").glob("seed*") if p.is_dir())
    students = sorted(p / "model" for p in runs.glob("multi30k-student*") if p.is_dir())
    return [t for t in teachers if t.is_dir()], [s for s in students if s.is_dir()]


def shape(model_dir: Path) -> dict[str, Any]:
    """Layers, width and parameters of the model in ``model_dir`` (its config.json)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    config = config.get("config", config)
    return {
        "encoder_layers": config.get("num_encoder_layers"),
        "decoder_layers": config.get("num_decoder_layers"),
        "d_model": config.get("d_model"),
        "d_ff": config.get("d_ff"),
    }


def systems(teachers: list[Path], students: list[Path]) -> list[dict[str, Any]]:
    """What is measured: one recipe model (the first teacher), the ensemble of the teachers
    (two or more), each student; each with its model directories."""
    out: list[dict[str, Any]] = []
    if teachers:
        out.append({"name": "recipe model", "kind": "teacher", "dirs": [str(teachers[0])]})
    if len(teachers) > 1:
        name = f"ensemble of {len(teachers)}"
        out.append({"name": name, "kind": "ensemble", "dirs": [str(t) for t in teachers]})
    for student in students:
        s = shape(student)
        label = f"{student.parent.name} ({s['encoder_layers']}-{s['decoder_layers']})"
        out.append({"name": label, "kind": "student", "dirs": [str(student)], "shape": s})
    return out


# -- quality -----------------------------------------------------------------------------------


@functools.cache
def split_pairs(model_dir: str, split: str, limit: int | None) -> tuple[list, str | None]:
    """The ``(source, reference)`` pairs of ``split`` of the model's own task, and its target
    language (read once per model, split and limit)."""
    from attnlab.jobs import read_job

    job = read_job(Path(model_dir))
    data = job.task.load()
    pairs = list(data[split])[:limit] if limit else list(data[split])
    return pairs, getattr(job.task, "tgt_lang", None)


#: What :func:`remembered` computed in this run without a workdir (``--fresh``), by name.
_THIS_RUN: dict[str, Any] = {}


def remembered(workdir: Path | None, what: str, key: dict[str, Any], compute) -> Any:
    """``compute()``, kept in ``workdir`` under a digest of ``key`` (the models' digests and
    the options) and read back by a later run with the same key; ``workdir`` None: computed
    once in this run (the quality, the bootstrap and the n-gram analysis read the same
    translations)."""
    name = f"{what}-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}"
    if workdir is None:
        if name not in _THIS_RUN:
            _THIS_RUN[name] = compute()
        return _THIS_RUN[name]
    path = workdir / f"{name}.json"
    if path.is_file():
        print(f"  (scores kept from an earlier run: {path})", flush=True)
        return json.loads(path.read_text(encoding="utf-8"))["value"]
    value = compute()
    from attnlab._io import write_json

    write_json(path, {"key": key, "value": value})
    return value


def quality(
    system: dict[str, Any],
    splits: list[str],
    limit: int | None,
    weights: tuple[str, ...] = ("float32", "int8"),
    workdir: Path | None = None,
) -> dict[str, Any]:
    """BLEU (cased detokenised, and lowercased tokenised) of ``system`` on each split, with
    each of ``weights``, decoded as its first directory says (kept in ``workdir``)."""
    key = {"dirs": [dir_digest(d) for d in system["dirs"]], "splits": splits, "limit": limit}
    key["weights"] = list(weights)
    compute = functools.partial(_quality, system, splits, limit, weights, workdir)
    return remembered(workdir, "quality", key, compute)


def hypotheses(
    system: dict[str, Any],
    split: str,
    limit: int | None,
    workdir: Path | None,
    translator: Any = None,
) -> list[str]:
    """The float32 translations of ``split`` by ``system``, decoded as its first directory says
    (kept in ``workdir``: the paired bootstrap reads them back); ``translator``: the system's
    float32 Translator when the caller has it loaded already (else loaded here if needed)."""
    key = {"dirs": [dir_digest(d) for d in system["dirs"]], "split": split, "limit": limit}

    def translate() -> list[str]:
        from attnlab.inference.translator import Translator

        loaded = translator or Translator.load(system["dirs"], device="cpu")
        pairs, _ = split_pairs(system["dirs"][0], split, limit)
        return loaded.translate([s for s, _ in pairs])

    return remembered(workdir, "hyps", key, translate)


def _quality(
    system: dict[str, Any],
    splits: list[str],
    limit: int | None,
    weights: tuple[str, ...],
    workdir: Path | None,
) -> dict[str, Any]:
    from attnlab.inference.scores import score
    from attnlab.inference.translator import Translator

    found: dict[str, Any] = {}
    for quantize in (None if w == "float32" else w for w in weights):
        translator = Translator.load(system["dirs"], device="cpu", quantize=quantize)
        decoding = translator.decoding
        for split in splits:
            pairs, lang = split_pairs(system["dirs"][0], split, limit)
            if quantize is None:  # kept: the bootstrap needs them
                hyps = hypotheses(system, split, limit, workdir, translator)
            else:
                hyps = translator.translate([s for s, _ in pairs])
            result = score(hyps, [t for _, t in pairs], tokenized_lang=lang).to_dict()
            found[f"{split}/{quantize or 'float32'}"] = {
                "bleu": result["bleu"],
                "bleu_tokenized": result.get("bleu_tokenized"),
                "chrf": result["chrf"],
                "signature": result.get("bleu_signature"),
                "sentences": len(pairs),
                "beam_size": decoding.beam_size,
                "alpha": decoding.alpha,
            }
    return found


def bootstrap(
    systems_: list[dict[str, Any]],
    splits: list[str],
    limit: int | None,
    workdir: Path | None,
    samples: int = 1000,
) -> dict[str, Any]:
    """How much a score moves with the sentences drawn: paired bootstrap resampling (Koehn
    2004; sacreBLEU's implementation and seed) of every system's float32 BLEU on each split, once
    against the recipe model and once against the ensemble. Per split and system: the BLEU,
    its bootstrap mean and the half-width of its 95% interval, and the p-value of its
    difference from each baseline (the chance of a difference that large were the two systems
    equally good; two systems with the same translations get the smallest p, 1 / (samples + 1),
    by sacreBLEU's convention that a difference of zero is not chance)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    baselines = [s["name"] for s in systems_ if s["kind"] in ("teacher", "ensemble")]
    found: dict[str, Any] = {}
    for split in splits:
        pairs, _ = split_pairs(systems_[0]["dirs"][0], split, limit)
        references = [[t for _, t in pairs]]
        hyps = {s["name"]: hypotheses(s, split, limit, workdir) for s in systems_}
        per_split: dict[str, Any] = found.setdefault(split, {})
        for baseline in baselines:
            names = [baseline] + [name for name in hyps if name != baseline]
            test = PairedTest(
                [(name, hyps[name]) for name in names],
                {"BLEU": BLEU()},
                references,
                test_type="bs",
                n_samples=samples,
            )
            _, results = test()
            for name, result in zip(results["System"], results["BLEU"], strict=True):
                entry = per_split.setdefault(
                    name, {"bleu": result.score, "mean": result.mean, "ci95": result.ci}
                )
                if result.p_value is not None:
                    entry[f"p_vs_{baseline}"] = result.p_value
    return found


def ct2_quality(system: dict[str, Any], split: str, limit: int | None, keep: Path | None) -> dict:
    """BLEU of the first model of ``system`` on attnlab's ctranslate2 engine (float32 and
    int8), decoding as its directory says: its beam, ranked by its alpha as on the torch engine
    (kept in ``keep``; None: scored again)."""
    # "ranking": attnlab's length penalty, so that scores kept while CTranslate2 ranked by its
    # own are not read back.
    digest = dir_digest(system["dirs"][0])
    key = {"dir": digest, "split": split, "limit": limit, "ranking": "attnlab"}
    return remembered(keep, "ct2-quality", key, lambda: _ct2_quality(system, split, limit))


def _ct2_quality(system: dict[str, Any], split: str, limit: int | None) -> dict:
    from attnlab.inference.scores import score

    found = {}
    pairs, lang = split_pairs(system["dirs"][0], split, limit)
    for quantize in ("float32", "int8"):
        run = runner(system["dirs"][:1], quantize, "ctranslate2")
        hyps, _ = run([s for s, _ in pairs], 32)
        result = score(hyps, [t for _, t in pairs], tokenized_lang=lang).to_dict()
        found[f"{split}/{quantize}"] = {
            "bleu": result["bleu"],
            "bleu_tokenized": result.get("bleu_tokenized"),
            "chrf": result["chrf"],
            "sentences": len(pairs),
        }
    return found


# -- what else the pages quote: the seeds, n-grams, imitation, the students' beam ---------------


def teacher_scores(
    report: dict[str, Any], teachers: list[Path], limit: int | None, workdir: Path | None
) -> dict[str, Any]:
    """Each teacher (seed) alone, float32, on both splits (the first one's are the recipe
    model's, scored already)."""
    out: dict[str, Any] = {}
    recipe = report["quality"].get("recipe model", {})
    for i, t in enumerate(teachers):
        if i == 0 and recipe:
            out[str(t)] = {k: v for k, v in recipe.items() if k.endswith("/float32")}
            continue
        one = {"name": str(t), "dirs": [str(t)]}
        out[str(t)] = quality(one, ["valid", "test"], limit, ("float32",), workdir=workdir)
    return out


def seeds_summary(teacher_quality: dict[str, Any]) -> dict[str, Any]:
    """The teachers' mean and sample standard deviation of each score on each split (the
    docs' "39.42 ± 0.48"), and how many teachers; {} with fewer than two."""
    if len(teacher_quality) < 2:
        return {}
    out: dict[str, Any] = {"teachers": len(teacher_quality)}
    for split in ("valid/float32", "test/float32"):
        rows = [q[split] for q in teacher_quality.values() if split in q]
        if len(rows) != len(teacher_quality):
            continue
        out[split] = {
            metric: {
                "mean": statistics.fmean(r[metric] for r in rows),
                "sd": statistics.stdev(r[metric] for r in rows),
            }
            for metric in ("bleu", "bleu_tokenized", "chrf")
            if all(r.get(metric) is not None for r in rows)
        }
    return out


def analysis(
    systems_: list[dict[str, Any]], splits: list[str], limit: int | None, workdir: Path | None
) -> dict[str, Any]:
    """Per split and system (float32, as it decodes): BLEU's brevity penalty, its four n-gram
    precisions and the lengths; and its BLEU with the ensemble's translations, then the recipe
    model's, as the references, and the share of its translations identical to theirs (how
    closely it imitates them; not against itself)."""
    from sacrebleu.metrics import BLEU

    found: dict[str, Any] = {}
    for split in splits:
        pairs, _ = split_pairs(systems_[0]["dirs"][0], split, limit)
        references = [t for _, t in pairs]
        hyps = {s["name"]: hypotheses(s, split, limit, workdir) for s in systems_}
        imitated = {s["name"]: hyps[s["name"]] for s in systems_ if s["kind"] != "student"}
        per_split = found.setdefault(split, {})
        for name, hyp in hyps.items():
            b = BLEU().corpus_score(hyp, [references])
            entry = {
                "bleu": b.score,
                "brevity_penalty": b.bp,
                "precisions": list(b.precisions),
                "hyp_len": b.sys_len,
                "ref_len": b.ref_len,
            }
            for other, theirs in imitated.items():
                if other != name:
                    entry[f"bleu_vs_{other}"] = BLEU().corpus_score(hyp, [theirs]).score
                    same = sum(a == b for a, b in zip(hyp, theirs, strict=True))
                    entry[f"same_as_{other}"] = same / max(len(hyp), 1)
            per_split[name] = entry
    return found


def beam_of_greedy(
    report: dict[str, Any], beam: int, limit: int | None, workdir: Path | None
) -> dict[str, Any]:
    """Validation BLEU (float32) of each student its directory decodes greedily, once more
    with beam ``beam`` (its directory's alpha): what the beam would add."""
    out: dict[str, Any] = {}
    for s in report["systems"]:
        greedy = report["quality"][s["name"]]["valid/float32"]
        if s["kind"] != "student" or greedy["beam_size"] != 1:
            continue
        key = {"dirs": [dir_digest(d) for d in s["dirs"]], "beam": beam, "limit": limit}
        wide = remembered(workdir, "beam", key, functools.partial(_beam_scores, s, beam, limit))
        out[s["name"]] = {
            "greedy": greedy["bleu"],
            f"beam {beam}": wide["bleu"],
            "chrf": {"greedy": greedy["chrf"], f"beam {beam}": wide["chrf"]},
            "beam": beam,
        }
    return out


def _beam_scores(system: dict[str, Any], beam: int, limit: int | None) -> dict[str, float]:
    from attnlab.inference.scores import score
    from attnlab.inference.translator import Translator

    translator = Translator.load(system["dirs"], device="cpu")
    decoding = translator.decoding.updated(beam_size=beam)
    pairs, lang = split_pairs(system["dirs"][0], "valid", limit)
    hyps = translator.translate([s for s, _ in pairs], decoding=decoding)
    found = score(hyps, [t for _, t in pairs], tokenized_lang=lang)
    return {"bleu": found.bleu, "chrf": found.chrf}


def like_threads(speed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """attnlab's tokens/s over CTranslate2's for the same system, weights, batch and thread
    count (never one engine's best thread count against the other's)."""
    out = []
    for row in speed:
        if row["engine"] != "attnlab":
            continue
        theirs = next(
            (
                r
                for r in speed
                if r["engine"] == "ctranslate2"
                and (r["system"], r["weights"], r["batch"])
                == (row["system"], row["weights"], row["batch"])
            ),
            None,
        )
        if theirs is None:
            continue
        for threads, ours in row["by_threads"].items():
            other = theirs["by_threads"].get(threads)
            if other:
                out.append(
                    {
                        "system": row["system"],
                        "weights": row["weights"],
                        "batch": row["batch"],
                        "threads": int(threads),
                        "attnlab_over_ctranslate2": ours["tokens_per_s"] / other["tokens_per_s"],
                    }
                )
    return out


# -- the blind sets: translated, never scored --------------------------------------------------


def blind_sets(directory: Path, src_lang: str) -> dict[str, list[str]]:
    """The blind sets in ``directory``: each ``SET.SRC.gz`` (or ``SET.SRC``) file's lines, by
    ``SET``. Sources only: there is nothing to score them against, and nothing here trains,
    tunes, chooses or filters on them."""
    import gzip

    found: dict[str, list[str]] = {}
    for path in sorted(directory.iterdir()):
        name = path.name.removesuffix(".gz")
        if not name.endswith(f".{src_lang}"):
            continue
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            found[name.removesuffix(f".{src_lang}")] = f.read().splitlines()
    return found


def blind_systems(teachers: list[Path], students: list[Path]) -> list[dict[str, Any]]:
    """Every system the blind sets are translated with: each teacher, their ensemble (two or
    more), each student; each with a file-name ``slug`` (its run's directory name, else
    ``teacherN``; the ensemble ``ensemble``)."""
    out: list[dict[str, Any]] = []
    names = [t.parent.name for t in teachers]
    for i, t in enumerate(teachers):
        slug = names[i] if names.count(names[i]) == 1 else f"teacher{i}"
        out.append({"slug": slug, "dirs": [str(t)]})
    if len(teachers) > 1:
        out.append({"slug": "ensemble", "dirs": [str(t) for t in teachers]})
    taken = {s["slug"] for s in out}
    for i, s in enumerate(students):
        slug = s.parent.name if s.parent.name not in taken else f"student{i}"
        taken.add(slug)
        out.append({"slug": slug, "dirs": [str(s)]})
    return out


def blind(
    systems_: list[dict[str, Any]], directory: Path, out_dir: Path, workdir: Path | None
) -> dict[str, Any]:
    """Each blind set translated by each system (attnlab, float32, decoding as its first
    directory says), one line per source line, into ``out_dir/SLUG.SET.TGT``, written
    atomically; kept in ``workdir`` keyed by the models' files and the set's lines. Returns
    what was written: per system its decoding and per set the file, its lines and digest."""
    from attnlab._io import atomic_write
    from attnlab.decode.options import DecodingOptions
    from attnlab.inference.translator import Translator
    from attnlab.jobs import read_job

    task = read_job(Path(systems_[0]["dirs"][0])).task
    src, tgt = getattr(task, "src_lang", "en"), getattr(task, "tgt_lang", "out")
    sets = blind_sets(directory, src)
    if not sets:
        raise SystemExit(f"distill.py: --blind: no SET.{src}.gz or SET.{src} file in {directory}")
    report: dict[str, Any] = {
        "sets": {name: len(lines) for name, lines in sets.items()},
        "systems": {},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for system in systems_:
        translator = functools.cache(lambda s=system: Translator.load(s["dirs"], device="cpu"))
        files = {}
        for name, lines in sets.items():
            digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
            key = {"dirs": [dir_digest(d) for d in system["dirs"]], "set": digest}
            print(f"  blind {name}: {system['slug']} ({len(lines):,} lines)", flush=True)
            hyps = remembered(workdir, "blind", key, lambda t=translator, x=lines: t().translate(x))
            if len(hyps) != len(lines) or any("\n" in h for h in hyps):
                raise RuntimeError(f"{system['slug']} gave {len(hyps)} lines for {len(lines)}")
            path = out_dir / f"{system['slug']}.{name}.{tgt}"
            text = "".join(h + "\n" for h in hyps)
            atomic_write(path, lambda temp, t=text: Path(temp).write_text(t, encoding="utf-8"))
            files[name] = {
                "file": path.name,
                "lines": len(hyps),
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
        carried = DecodingOptions.carried_by(system["dirs"][0])[0]
        report["systems"][system["slug"]] = {
            "dirs": system["dirs"],
            "decoding": {"beam_size": carried.beam_size, "alpha": carried.alpha},
            "files": files,
        }
    return report


# -- the engines (run inside a worker for timing) ----------------------------------------------


@functools.cache
def dir_digest(model_dir: str) -> str:
    """A digest of the files of ``model_dir`` (weights, config, tokenizers, decoding): what an
    export or a score made from it is keyed by, so that a retrained model is measured anew."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def runner(dirs: list[str], quantize: str, engine: str = "torch"):
    """``run(texts, batch) -> (translations, generated tokens)`` with attnlab's Translator on
    ``engine`` (an ensemble for several ``dirs``, torch only), decoding as the first directory
    says (its beam and alpha: the ctranslate2 engine ranks a beam by attnlab's length penalty
    too) within attnlab's output limit, in batches of ``batch`` sources. The thread count is
    torch's (the ctranslate2 engine takes it as its own)."""
    from attnlab.inference.translator import Translator

    weights = None if quantize == "float32" else quantize
    translator = Translator.load(dirs, device="cpu", quantize=weights, engine=engine)

    def run(texts: list[str], batch: int) -> tuple[list[str], int]:
        out: list[str] = []
        tokens = 0
        for start in range(0, len(texts), batch):
            for row in translator.hypotheses(texts[start : start + batch], scored=False):
                out.append(row[0].text if row else "")
                tokens += len(row[0].ids) if row else 0  # EOS counted where it ended
        return out, tokens

    return run


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One timed measurement (run in a child process): warm up, then translate the texts."""
    import torch

    if spec["engine"] == "profile":
        return profile_worker(spec)
    threads = spec["threads"]
    torch.set_num_threads(threads)
    engine = "ctranslate2" if spec["engine"] == "ctranslate2" else "torch"
    run = runner(spec["dirs"], spec["quantize"], engine)
    texts, batch = spec["texts"], spec["batch"]
    run(texts[: min(len(texts), max(batch, 4))], batch)  # warm-up
    seconds, cpu = [], []
    tokens = 0
    for _ in range(spec["repeats"]):
        began, began_cpu = time.perf_counter(), time.process_time()
        _, tokens = run(texts, batch)
        seconds.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    best = min(seconds)
    return {
        "tokens": tokens,
        "seconds": seconds,
        # CPU seconds of this process's threads in each pass: at 1 thread, well under the
        # pass's seconds means the process waited for a core (another job was running).
        "cpu_seconds": cpu,
        "tokens_per_s": tokens / best,
        "tokens_per_s_median": tokens / statistics.median(seconds),
    }


def profile_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Where one sentence at a time goes in attnlab (float32, 1 thread): benchmarks/decode.py's
    profile of a decode (``_profile``: the wall time, the aten calls and the time outside any op,
    each per step, with the shares by kind of op), over the generated tokens of ``texts``
    translated one by one, so that a "step" here is a generated token."""
    import torch

    from decode import _profile  # benchmarks/decode.py, beside this script

    torch.set_num_threads(1)
    run = runner(spec["dirs"], "float32")
    texts = spec["texts"]
    _, tokens = run(texts, 1)  # the warm-up, which counts the tokens a pass generates
    return {
        "sentences": len(texts),
        "tokens": tokens,
        **_profile(lambda batch, beam: run(texts, batch), 1, 1, tokens),
    }


def profiles(report: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """:func:`profile_worker` for the recipe model (beam 4) and the chosen fast student
    (greedy), each in a fresh process, with CTranslate2's time per token at batch 1 (its best
    weight type and thread count, from the report's speed rows) beside them."""
    fast = (report.get("fast_student") or {}).get("chosen")
    out: dict[str, Any] = {}
    for s in report["systems"]:
        if s["name"] not in ("recipe model", fast):
            continue
        print(f"{s['name']}: profiling one sentence at a time", flush=True)
        one = measure({"engine": "profile", "dirs": s["dirs"], "texts": texts, "threads": 1})
        ct2 = [rate(report["speed"], s["name"], "ctranslate2", w, 1) for w in ("float32", "int8")]
        ct2 = [c for c in ct2 if c]
        if ct2:
            one["ctranslate2_us_per_token"] = 1e6 / max(ct2)
        out[s["name"]] = one
    return out


def machine_busy(seconds: float = 1.0) -> float | None:
    """The share of the machine's CPU time (every core, /proc/stat) spent busy over the next
    ``seconds``, while this process sleeps: what other jobs use. None where /proc/stat is not."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    try:
        total, idle = sample()
        time.sleep(seconds)
        total2, idle2 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle2 - idle) / max(total2 - total, 1)


def wait_quiet(limit: float, busy_at_most: float = 0.15) -> tuple[float | None, float]:
    """Wait (at most ``limit`` seconds) until other jobs use at most ``busy_at_most`` of the
    CPU, saying so once: the share last measured (a timing taken beside another job shows),
    and the seconds waited."""
    began = time.monotonic()
    busy = machine_busy()
    told = False
    while busy is not None and busy > busy_at_most and time.monotonic() - began < limit:
        if not told:
            print(f"  the machine is {busy:.0%} busy: waiting for it to be quiet", flush=True)
            told = True
        time.sleep(4.0)
        busy = machine_busy()
    return busy, time.monotonic() - began


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`worker` in a fresh process with ``spec['threads']`` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]))
    env["MKL_NUM_THREADS"] = str(spec["threads"])
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {spec['engine']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the report --------------------------------------------------------------------------------


def speed_rows(
    system: dict[str, Any], texts: list[str], args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    """Tokens/s of ``system`` for every engine, weight type and batch, best of the threads."""
    engines = ["attnlab"]
    if len(system["dirs"]) == 1 and not args.no_ct2:
        engines.append("ctranslate2")  # CTranslate2 declines ensembles (OpenNMT/CTranslate2#273)
    rows = []
    for engine in engines:
        for quantize in ("float32", "int8"):
            for batch in args.batches:
                per_thread = {}
                for threads in args.threads:
                    spec = {
                        "engine": engine,
                        "dirs": system["dirs"],
                        "quantize": quantize,
                        "batch": batch,
                        "threads": threads,
                        "texts": texts,
                        "repeats": args.repeats,
                        "workdir": str(workdir),
                    }
                    busy, waited = wait_quiet(args.quiet_wait)
                    args.quiet_wait = max(0.0, args.quiet_wait - waited)  # the run's budget
                    got = per_thread[threads] = measure(spec)
                    got["busy_before"] = busy
                    share = sum(got["cpu_seconds"]) / sum(got["seconds"])
                    print(
                        f"  {system['name']}: {engine} {quantize} batch {batch}, {threads} "
                        f"thread(s): {got['tokens_per_s']:,.0f} tokens/s (CPU {share:.2f}x the "
                        f"wall clock"
                        + ("" if busy is None else f"; the machine {busy:.0%} busy before")
                        + ")",
                        flush=True,
                    )
                best = max(per_thread, key=lambda t: per_thread[t]["tokens_per_s"])
                rows.append(
                    {
                        "system": system["name"],
                        "engine": engine,
                        "weights": quantize,
                        "batch": batch,
                        "tokens_per_s": per_thread[best]["tokens_per_s"],
                        "best_threads": best,
                        "by_threads": {str(t): v for t, v in per_thread.items()},
                    }
                )
    return rows


def speed_texts(model_dir: str, n: int) -> list[str]:
    """The sources every speed figure translates: the first ``n`` of the validation split of
    ``model_dir``'s task, in their file's order."""
    return [s for s, _ in split_pairs(model_dir, "valid", None)[0]][:n]


def rate(rows: list[dict], system: str, engine: str, weights: str, batch: int) -> float | None:
    for row in rows:
        if (row["system"], row["engine"], row["weights"], row["batch"]) == (
            system,
            engine,
            weights,
            batch,
        ):
            return float(row["tokens_per_s"])
    return None


def choice(report: dict[str, Any], fast: bool) -> dict[str, Any] | None:
    """The student chosen on validation, as the issue asks: of the fast students (fewer
    decoder than encoder layers; ``fast``) or of those of the recipe's shape, the best
    validation BLEU (float32, each decoding as its directory says); a tie goes to fewer
    decoder layers. None without such a student."""
    kin = [s for s in report["systems"] if s["kind"] == "student" and _is_fast(s["shape"]) == fast]
    scored = {s["name"]: report["quality"][s["name"]]["valid/float32"]["bleu"] for s in kin}
    if not scored:
        return None
    layers = {s["name"]: s["shape"]["decoder_layers"] for s in kin}
    chosen = max(scored, key=lambda name: (round(scored[name], 2), -layers[name]))
    return {"chosen": chosen, "validation_bleu": scored}


def _is_fast(shape_: dict[str, Any]) -> bool:
    return shape_["decoder_layers"] < shape_["encoder_layers"]


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, each with its measured figure and whether it is met (None: what it
    needs was not measured)."""
    out: list[dict[str, Any]] = []
    q = report["quality"]
    speed = report["speed"]
    teachers = report["teachers"]
    valid = "valid/float32"

    def add(goal: str, figure: str, met: bool | None) -> None:
        out.append({"goal": goal, "measured": figure, "met": met})

    each = [report["teacher_quality"][t][valid]["bleu"] for t in teachers]
    ensemble = next((s for s in report["systems"] if s["kind"] == "ensemble"), None)
    if ensemble and each:
        mean = statistics.fmean(each)
        got = q[ensemble["name"]][valid]["bleu"]
        add(
            f"ensemble: validation >= teachers' mean + {ENSEMBLE_GAIN}",
            f"{got:.2f} against {mean:.2f} (+{got - mean:.2f})",
            got >= mean + ENSEMBLE_GAIN,
        )
    recipe = q.get("recipe model")
    for s in report["systems"]:
        if s["kind"] != "student":
            continue
        test = q[s["name"]].get("test/float32")
        if test is None:
            continue
        if s["name"] not in {(report.get(k) or {}).get("chosen") for k in CHOICES}:
            continue  # the goals are judged on the students chosen on validation
        if not _is_fast(s["shape"]):
            tokenized = test["bleu_tokenized"]
            add(
                f"{s['name']}: test >= {STUDENT_CASED} cased and >= {STUDENT_TOKENIZED} "
                f"lowercased tokenised",
                f"{test['bleu']:.2f} cased, "
                f"{'unmeasured' if tokenized is None else f'{tokenized:.2f}'} tokenised",
                test["bleu"] >= STUDENT_CASED
                and tokenized is not None
                and tokenized >= STUDENT_TOKENIZED,
            )
            continue
        if recipe is None:
            continue
        teacher_bleu = recipe["test/float32"]["bleu"]
        for weights in ("float32", "int8"):
            bleu = q[s["name"]][f"test/{weights}"]["bleu"]
            add(
                f"{s['name']} {weights}, greedy: test BLEU within {FAST_BLEU_GAP} of one recipe "
                f"model with beam 4",
                f"{bleu:.2f} against {teacher_bleu:.2f} ({bleu - teacher_bleu:+.2f})",
                bleu >= teacher_bleu - FAST_BLEU_GAP,
            )
            fast = rate(speed, s["name"], "attnlab", weights, 1)
            slow = rate(speed, "recipe model", "attnlab", "float32", 1)
            if fast and slow:
                add(
                    f"{s['name']} {weights}: batch 1 >= {FAST_OVER_TEACHER}x the recipe model's "
                    f"tokens/s in attnlab (beam 4)",
                    f"{fast:,.0f} against {slow:,.0f} tokens/s ({fast / slow:.2f}x)",
                    fast / slow >= FAST_OVER_TEACHER,
                )
            ct2 = (rate(speed, "recipe model", "ctranslate2", w, 1) for w in ("float32", "int8"))
            best = max(filter(None, ct2), default=None)
            # Issue 45: the student in attnlab's torch engine; issue 59: on attnlab's
            # ctranslate2 engine (`attnlab translate --engine ctranslate2`), at its BLEU there.
            there = report["ct2_quality"].get(s["name"], {}).get(f"test/{weights}")
            on_ct2 = rate(speed, s["name"], "ctranslate2", weights, 1)
            for where, own, bleu in (("", fast, None), (CT2_ENGINE, on_ct2, there)):
                if own and best:
                    add(
                        f"{s['name']} {weights}{where}: batch 1 >= {FAST_OVER_CT2}x CTranslate2 "
                        f"running the recipe model with beam 4 (its faster weight type)",
                        f"{own:,.0f} against {best:,.0f} tokens/s ({own / best:.2f}x)"
                        + (f", test BLEU {bleu['bleu']:.2f}" if bleu else ""),
                        own / best >= FAST_OVER_CT2,
                    )
    return out


def table(report: dict[str, Any]) -> str:
    """BLEU against tokens/s as a Markdown table."""
    lines = [
        "| system | engine | weights | valid BLEU | test BLEU | tokenised | tokens/s batch 1 "
        "| batch 32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report["systems"]:
        name = s["name"]
        for engine in ("attnlab", "ctranslate2"):
            for weights in ("float32", "int8"):
                source = report["quality"] if engine == "attnlab" else report["ct2_quality"]
                scores = source.get(name, {}).get(f"test/{weights}")
                if scores is None:
                    continue
                speeds = [rate(report["speed"], name, engine, weights, b) for b in (1, 32)]
                shown = [f"{v:,.0f}" if v else "-" for v in speeds]
                tok = scores.get("bleu_tokenized")
                valid = source.get(name, {}).get(f"valid/{weights}")
                lines.append(
                    f"| {name} | {engine} | {weights} | "
                    f"{'-' if valid is None else format(valid['bleu'], '.2f')} | "
                    f"{scores['bleu']:.2f} | "
                    f"{'-' if tok is None else f'{tok:.2f}'} | {shown[0]} | {shown[1]} |"
                )
    return "\n".join(lines)


def seeds_table(report: dict[str, Any]) -> str | None:
    """Each teacher, their mean (± the sample standard deviation) and their ensemble, as a
    Markdown table; None unless each teacher was scored on both splits."""
    tq, seeds = report.get("teacher_quality", {}), report.get("seeds") or {}
    if len(tq) < 2 or "test/float32" not in seeds:
        return None
    lines = [
        "| system | validation BLEU | test BLEU | tokenised | chrF | int8: test BLEU |",
        "|---|---|---|---|---|---|",
    ]
    int8 = report["quality"]["recipe model"].get("test/int8")
    for i, (model_dir, q) in enumerate(tq.items()):
        test = q["test/float32"]
        lines.append(
            f"| {Path(model_dir).parent.name} | {q['valid/float32']['bleu']:.2f} | "
            f"{test['bleu']:.2f} | {_num(test.get('bleu_tokenized'))} | {test['chrf']:.2f} | "
            f"{_num(int8['bleu']) if i == 0 and int8 else ''} |"
        )
    v, t = seeds["valid/float32"], seeds["test/float32"]
    tok = t.get("bleu_tokenized")
    lines.append(
        f"| the teachers' mean | {v['bleu']['mean']:.2f} | {t['bleu']['mean']:.2f} ± "
        f"{t['bleu']['sd']:.2f} | "
        + (f"{tok['mean']:.2f} ± {tok['sd']:.2f}" if tok else "-")
        + f" | {t['chrf']['mean']:.2f} | |"
    )
    ensemble = next((s for s in report["systems"] if s["kind"] == "ensemble"), None)
    if ensemble:
        q = report["quality"][ensemble["name"]]
        test = q["test/float32"]
        lines.append(
            f"| **{ensemble['name']}** | **{q['valid/float32']['bleu']:.2f}** | "
            f"**{test['bleu']:.2f}** | **{_num(test.get('bleu_tokenized'))}** | "
            f"{test['chrf']:.2f} | {_num(q.get('test/int8', {}).get('bleu'))} |"
        )
    return "\n".join(lines)


def analysis_table(report: dict[str, Any]) -> str | None:
    """The brevity penalty, n-gram precisions and imitation BLEU of each system on each split
    (``report['analysis']``), as a Markdown table; None without them."""
    found = report.get("analysis")
    if not found:
        return None
    others = [s["name"] for s in report["systems"] if s["kind"] != "student"]
    lines = [
        "| split | system | brevity penalty | 1-gram | 2-gram | 3-gram | 4-gram | "
        + " | ".join(f"BLEU against the {o}'s translations" for o in others)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(others),
    ]
    for split, per_system in found.items():
        for name, a in per_system.items():
            vs = [_num(a.get(f"bleu_vs_{o}")) for o in others]
            lines.append(
                f"| {split} | {name} | {a['brevity_penalty']:.3f} | "
                + " | ".join(f"{p:.1f}" for p in a["precisions"])
                + " | "
                + " | ".join(vs)
                + " |"
            )
    return "\n".join(lines)


def beam_table(report: dict[str, Any]) -> str | None:
    """What a beam adds to the students that decode greedily (validation BLEU), beside the
    recipe model's own; None without such a student."""
    found = report.get("beam_of_greedy")
    if not found:
        return None
    beam = next(iter(found.values()))["beam"]
    lines = [
        f"| validation BLEU | greedy | beam {beam} | what the beam adds |",
        "|---|---|---|---|",
    ]
    for name, b in found.items():
        wide = b[f"beam {beam}"]
        lines.append(f"| {name} | {b['greedy']:.2f} | {wide:.2f} | {wide - b['greedy']:+.2f} |")
    recipe = report["quality"].get("recipe model", {}).get("valid/float32")
    if recipe:
        lines.append(f"| recipe model (beam {recipe['beam_size']}) | | {recipe['bleu']:.2f} | |")
    return "\n".join(lines)


def threads_table(report: dict[str, Any]) -> str | None:
    """attnlab's tokens/s over CTranslate2's at the same thread count, per system, weights and
    batch (``report['like_threads']``); None without them."""
    rows = report.get("like_threads")
    if not rows:
        return None
    threads = sorted({r["threads"] for r in rows})
    lines = [
        "| system | weights | batch | "
        + " | ".join(f"attnlab / CTranslate2, {t} thread{'s' * (t > 1)}" for t in threads)
        + " |",
        "|---|---|---|" + "---|" * len(threads),
    ]
    keys = dict.fromkeys((r["system"], r["weights"], r["batch"]) for r in rows)
    for system, weights, batch in keys:
        ratio = {
            r["threads"]: r["attnlab_over_ctranslate2"]
            for r in rows
            if (r["system"], r["weights"], r["batch"]) == (system, weights, batch)
        }
        shown = [f"{ratio[t]:.2f}x" if t in ratio else "-" for t in threads]
        lines.append(f"| {system} | {weights} | {batch} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def blind_table(report: dict[str, Any]) -> str | None:
    """The blind sets' translations on file: per system its decoding and each set's lines;
    None without them."""
    found = report.get("blind")
    if not found:
        return None
    sets = list(found["sets"])
    lines = [
        "| system | beam | alpha | " + " | ".join(sets) + " |",
        "|---|---|---|" + "---|" * len(sets),
        "| (source lines) | | | " + " | ".join(f"{found['sets'][n]:,}" for n in sets) + " |",
    ]
    for slug, s in found["systems"].items():
        counts = [f"{s['files'][n]['lines']:,}" for n in sets]
        d = s["decoding"]
        lines.append(f"| {slug} | {d['beam_size']} | {d['alpha']} | " + " | ".join(counts) + " |")
    return "\n".join(lines)


def costs_table(report: dict[str, Any]) -> str | None:
    """Each run's computing time and core-hours (``report['costs']``), the teachers' decoding
    once (every student reuses its corpus); None unless some run recorded its threads."""
    found = report.get("costs") or {}
    if not any("core_hours" in c for c in found.values()):
        return None
    lines = ["| step | minutes | threads | core-hours |", "|---|---|---|---|"]
    decoding = None
    for run, c in found.items():
        minutes = c.get("busy_minutes")
        lines.append(
            f"| {run} | {_num(minutes, '.0f')} | {c.get('threads', '-')} | "
            f"{_num(c.get('core_hours'), '.1f')} |"
        )
        if decoding is None and "teacher_decoding_core_hours" in c:
            decoding = c
    if decoding:  # after the teachers, before the students it served
        lines.insert(
            2 + sum(1 for c in found.values() if c.get("kind") == "teacher"),
            f"| the teachers' decoding | {decoding['teacher_decoding_minutes']:.0f} | "
            f"{decoding['teacher_decoding_threads']} | "
            f"{decoding['teacher_decoding_core_hours']:.1f} |",
        )
    return "\n".join(lines)


def pages(report: dict[str, Any]) -> list[str]:
    """Every Markdown table docs/distillation.md quotes from the report (those it has the
    figures for), in the page's order."""
    made = [table(report), seeds_table(report), beam_table(report), analysis_table(report)]
    made += [threads_table(report), costs_table(report), blind_table(report)]
    return [t for t in made if t]


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _short(name: str) -> str:
    """A system's name as the picture labels it: ``multi30k-student-6-2 (6-2)`` -> ``6-2``."""
    return name.split(" (")[0].removeprefix("multi30k-student-").replace("recipe model", "recipe")


def picture(report: dict[str, Any], path: Path) -> None:
    """BLEU (test) against tokens/s, batch 1 and batch 32 side by side: a colour for each engine
    and weight type, a marker for each kind of system, a system's points joined by a thin line
    and labelled once."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)
    markers = {"teacher": "o", "ensemble": "*", "student": "s"}
    colors = {
        ("attnlab", "float32"): "tab:blue",
        ("attnlab", "int8"): "tab:cyan",
        ("ctranslate2", "float32"): "tab:red",
        ("ctranslate2", "int8"): "tab:orange",
    }
    for ax, batch in zip(axes, (1, 32), strict=True):
        for s in report["systems"]:
            points = []
            for (engine, weights), color in colors.items():
                source = report["quality"] if engine == "attnlab" else report["ct2_quality"]
                scores = source.get(s["name"], {}).get(f"test/{weights}")
                speed = rate(report["speed"], s["name"], engine, weights, batch)
                if scores is None or not speed:
                    continue
                points.append((speed, scores["bleu"]))
                ax.scatter(speed, scores["bleu"], marker=markers[s["kind"]], color=color, s=60)
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, color="gray", linewidth=0.6, alpha=0.5, zorder=0)
                ax.annotate(
                    _short(s["name"]),
                    points[0],
                    xytext=(-6, -13 if s["kind"] == "teacher" else 5),  # students may tie it
                    textcoords="offset points",
                    ha="right",
                    fontsize=8,
                )
        ax.set_xscale("log")
        ax.set_xlabel(f"tokens/s, batch {batch} (best of 1 and 2 threads)")
        ax.set_title(f"batch {batch}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test BLEU (sacreBLEU, cased)")
    handles = [
        plt.Line2D([], [], color=c, marker="o", linestyle="", label=f"{e} {w}")
        for (e, w), c in colors.items()
    ]
    handles += [
        plt.Line2D([], [], color="gray", marker=m, linestyle="", label=k)
        for k, m in markers.items()
    ]
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=len(handles), frameon=False)
    fig.suptitle("Multi30K en->de: quality against speed (labels at attnlab float32)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    from attnlab._io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temp: fig.savefig(temp, dpi=110, format="png"))
    plt.close(fig)


def costs(teachers: list[Path], students: list[Path]) -> dict[str, Any]:
    """Time on record, in minutes: each run's training, counted as its tokens over its median
    speed (``metrics.csv``; so time a run spent stopped, waiting or beside another job does not
    count, and its evaluations are left out), with its wall-clock ``elapsed_s`` beside it; and
    the teachers' decoding for each student (its results.json's ``distill`` record; a corpus
    reused from the cache keeps the seconds it took to make). Where a run recorded its threads
    (``results.json``: ``training.threads``, each process's, and the corpus's ``threads``),
    the core-hours: minutes times threads (times processes)."""
    out: dict[str, Any] = {}
    runs = [("teacher", t) for t in teachers] + [("student", s) for s in students]
    for kind, run in runs:
        results = run.parent / "results.json"
        if not results.is_file():
            continue
        training = json.loads(results.read_text(encoding="utf-8")).get("training", {})
        cost: dict[str, Any] = {"kind": kind, "wall_minutes": training.get("elapsed_s", 0) / 60}
        if training.get("threads"):  # recorded by runs since 2026-12-06
            cost["threads"] = training["threads"] * training.get("world_size", 1)
        rates = []
        metrics = run.parent / "metrics.csv"
        if metrics.is_file():
            with open(metrics, newline="", encoding="utf-8") as f:
                rates = [float(r["tokens_per_s"]) for r in csv.DictReader(f) if r["tokens_per_s"]]
        if rates and training.get("train_tokens"):
            cost["busy_minutes"] = training["train_tokens"] / statistics.median(rates) / 60
        out[run.parent.name] = cost
    for student in students:
        results = student.parent / "results.json"
        if not results.is_file():
            continue
        record = json.loads(results.read_text(encoding="utf-8")).get("distill") or {}
        corpora = [c for c in record.get("corpora", []) if c]
        seconds = [c.get("decode_seconds") for c in corpora]
        seconds = [s for s in seconds if isinstance(s, (int, float))]
        if seconds:
            cost = out.setdefault(student.parent.name, {})
            cost["teacher_decoding_minutes"] = sum(seconds) / 60
            threads = {c.get("threads") for c in corpora}
            if len(threads) == 1 and None not in threads:  # each process's; the seconds add up
                cost["teacher_decoding_threads"] = threads.pop()
    for cost in out.values():  # minutes a run computed on its threads
        if "busy_minutes" in cost and cost.get("threads"):
            cost["core_hours"] = cost["busy_minutes"] * cost["threads"] / 60
        if cost.get("teacher_decoding_threads"):
            minutes = cost["teacher_decoding_minutes"]
            cost["teacher_decoding_core_hours"] = minutes * cost["teacher_decoding_threads"] / 60
    return out


def add_profiles(args: argparse.Namespace) -> int:
    """``--profile``: :func:`profiles` added to the report of an earlier run."""
    from attnlab._io import read_json, write_json

    if not args.out.is_file():
        print(
            f"distill.py: --profile: no report at {args.out}; run without it first", file=sys.stderr
        )
        return 2
    report = read_json(args.out)
    texts = speed_texts(report["systems"][0]["dirs"][0], args.speed_sentences)
    report["profile"] = profiles(report, texts)
    for name, p in report["profile"].items():
        ct2 = p.get("ctranslate2_us_per_token")
        inside = 1 - p["outside_ops_us_per_step"] / p["profiled_wall_us_per_step"]
        print(
            f"  {name}: {p['wall_us_per_step']:,.0f} us a token in attnlab"
            + (f" ({ct2:,.0f} in CTranslate2)" if ct2 else "")
            + f", {p['aten_calls_per_step']:,.0f} aten calls a token "
            f"({p['python_calls_per_step']:,.0f} of them from Python), "
            f"{inside:.0%} of the time inside them (profiled)"
        )
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where the runs are")
    parser.add_argument("--teachers", nargs="*", type=Path, help="teacher model directories")
    parser.add_argument("--students", nargs="*", type=Path, help="student model directories")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    parser.add_argument("--picture", type=Path, default=DEFAULT_PICTURE, help="the PNG")
    parser.add_argument("--workdir", type=Path, default=None, help="kept scores")
    parser.add_argument("--speed-sentences", type=int, default=256, help="sources timed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (the best counts)")
    parser.add_argument("--limit", type=int, default=None, help="score the first N pairs only")
    parser.add_argument("--no-ct2", action="store_true", help="leave CTranslate2 out")
    parser.add_argument("--no-speed", action="store_true", help="scores only, no timing")
    parser.add_argument(
        "--fresh", action="store_true", help="score again, not from the workdir's kept scores"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: few sentences")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=1800.0,
        help="seconds in all (default 1800; --quick: 0) that the timings may wait for other "
        "jobs to leave the CPU; the share they used is recorded either way",
    )
    parser.add_argument(
        "--blind",
        type=Path,
        default=os.environ.get("ATTNLAB_MULTI30K_BLIND") or None,
        help="a directory of blind sets (SET.en.gz: sources only), translated by every system "
        "(default: $ATTNLAB_MULTI30K_BLIND; none without it)",
    )
    parser.add_argument(
        "--blind-out", type=Path, default=DEFAULT_BLIND, help="where their translations go"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="only print the tables docs/distillation.md quotes, from the report --out holds",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only profile one sentence at a time in attnlab (the recipe model and the chosen "
        "fast student) and add it to the report --out holds from an earlier run",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.quick:
        args.speed_sentences, args.threads, args.repeats, args.quiet_wait = 16, [1], 1, 0.0
        args.limit = args.limit or 20
    if args.profile:
        return add_profiles(args)
    if args.markdown:
        from attnlab._io import read_json

        print("\n\n".join(pages(read_json(args.out))))
        return 0
    found = discover(args.runs)
    teachers = args.teachers if args.teachers is not None else found[0]
    students = args.students if args.students is not None else found[1]
    if not teachers and not students:
        print(
            f"distill.py: no teachers under {args.runs}/multi30k-seeds and no students under "
            f"{args.runs}/multi30k-student*: run `make distill-multi30k` first",
            file=sys.stderr,
        )
        return 2
    workdir = args.workdir or args.out.parent / "distill-work"
    workdir.mkdir(parents=True, exist_ok=True)
    cache = None if args.fresh else workdir
    chosen = systems(teachers, students)
    report: dict[str, Any] = {
        "teachers": [str(t) for t in teachers],
        "students": [str(s) for s in students],
        "systems": chosen,
        "quality": {},
        "teacher_quality": {},
        "ct2_quality": {},
        "speed": [],
    }
    for system in chosen:
        print(f"{system['name']}: scoring", flush=True)
        report["quality"][system["name"]] = quality(
            system, ["valid", "test"], args.limit, workdir=cache
        )
        if len(system["dirs"]) == 1 and not args.no_ct2:
            report["ct2_quality"][system["name"]] = ct2_quality(
                system, "test", args.limit, keep=cache
            )
    # Each teacher alone (the ensemble's goal is over their mean on validation).
    report["teacher_quality"] = teacher_scores(report, teachers, args.limit, cache)
    report["seeds"] = seeds_summary(report["teacher_quality"])
    print("paired bootstrap: how far each score moves with the sentences drawn", flush=True)
    report["bootstrap"] = bootstrap(chosen, ["valid", "test"], args.limit, cache)
    print("n-gram precisions, and BLEU against the teachers' translations", flush=True)
    report["analysis"] = analysis(chosen, ["valid", "test"], args.limit, cache)
    report["beam_of_greedy"] = beam_of_greedy(report, 4, args.limit, cache)
    if args.blind is not None:
        print(f"the blind sets in {args.blind}: translated, never scored", flush=True)
        every = blind_systems(teachers, students)
        report["blind"] = blind(every, args.blind, args.blind_out, cache)
    else:
        print("no blind sets (--blind DIR or $ATTNLAB_MULTI30K_BLIND): none translated")
    texts = speed_texts(chosen[0]["dirs"][0], args.speed_sentences)
    for system in chosen if not args.no_speed else []:
        report["speed"] += speed_rows(system, texts, args, workdir)
    if report["speed"]:
        report["timing"] = (
            f"tokens/s: the best of {args.repeats} timed passes after a warm-up pass, at each "
            f"of {args.threads} threads; a row's figure is its best thread count's, and "
            f"like_threads compares the engines at the same thread count"
        )
        report["like_threads"] = like_threads(report["speed"])
    for key, fast in CHOICES.items():
        report[key] = choice(report, fast)
    report["goals"] = goals(report)
    report["costs"] = costs(teachers, students)
    report["machine"] = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0]}
    print()
    print("\n\n".join(pages(report)))
    print()
    for key, fast in CHOICES.items():
        if report[key]:
            picked = report[key]
            shown = ", ".join(f"{k} {v:.2f}" for k, v in picked["validation_bleu"].items())
            kind = "fast student" if fast else "student of the recipe's shape"
            print(f"{kind} chosen on validation: {picked['chosen']} ({shown})")
    for split, scores in report["bootstrap"].items():
        for name, b in scores.items():
            p = ", ".join(f"p {k[5:]} {v:.3f}" for k, v in b.items() if k.startswith("p_vs_"))
            print(
                f"  {split}: {name}: BLEU {b['bleu']:.2f} ± {b['ci95']:.2f} (95%)"
                + (f"; {p}" if p else "")
            )
    for goal in report["goals"]:
        state = {True: "MET", False: "MISSED", None: "not measured"}[goal["met"]]
        print(f"{state:>12}  {goal['goal']}: {goal['measured']}")
    for run, cost in report["costs"].items():
        shown = [f"{k} {v:.1f}" for k, v in cost.items() if isinstance(v, (int, float))]
        print(f"  cost {run} ({cost['kind']}): " + ", ".join(shown))
    from attnlab._io import write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, report)
    if report["speed"]:
        picture(report, args.picture)
    print(f"\nwrote {args.out}" + (f" and {args.picture}" if report["speed"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
