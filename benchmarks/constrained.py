"""Lexically constrained decoding on real data: constraints met, quality, speed.

Usage (the README's table):

    attnlab download multi30k    # once: Multi30K where attnlab looks for it
    python benchmarks/constrained.py --model runs/multi30k-en-de/model

(``--multi30k DIR`` for a copy elsewhere), or ``--src FILE --ref FILE`` for any parallel text.
Everything here is measured on the validation split (Multi30K ``val``): the constraints are
built from its references.

The rule that builds the constraints (fixed before any measurement, never looking at a test
set): translate every source without constraints; for each sentence take the words of its
reference (split at white space, punctuation stripped from their ends) that are alphabetic, at
least 4 letters long and missing from the unconstrained translation's words; keep the 2 longest
(the earlier on a tie), as separate phrases. Sentences with no such word get no constraints.
Those are the terms a translator would insist on: the reference's content words the model
missed.

Reported:

* constraints met: each phrase found in its constrained translation's text (the guarantee);
* BLEU and chrF (sacreBLEU, cased, detokenised) of the unconstrained and the constrained
  translations, on all sentences and on the constrained ones alone;
* speed: generated tokens per second of constrained against plain beam search at the same beam
  and length penalty, on the constrained sentences, batch 1 and batch 32, with 1 and 2 threads
  (interleaved repetitions, medians; the ratio is the number to read, the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import gc_paused  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "constrained.json"
MIN_LETTERS = 4
PER_SENTENCE = 2


def words(text: str) -> list[str]:
    """``text``'s words: split at white space, punctuation stripped from their ends."""
    out = []
    for raw in text.split():
        word = raw.strip(".,;:!?\"'()[]{}«»„“”‚‘’-")
        if word:
            out.append(word)
    return out


def build_constraints(hypotheses: list[str], references: list[str]) -> list[list[str]]:
    """The rule of the module's docstring: up to ``PER_SENTENCE`` of the reference's longest
    alphabetic words of at least ``MIN_LETTERS`` letters that the hypothesis lacks."""
    out = []
    for hyp, ref in zip(hypotheses, references, strict=True):
        have = set(words(hyp))
        missing = []
        for word in words(ref):
            wanted = word.isalpha() and len(word) >= MIN_LETTERS and word not in have
            if wanted and word not in missing:
                missing.append(word)
        ranked = sorted(range(len(missing)), key=lambda i: (-len(missing[i]), i))
        out.append([missing[i] for i in sorted(ranked[:PER_SENTENCE])])
    return out


def speed(translator, sources: list[str], phrases: list[list[str]], batch: int, threads: int,
          reps: int) -> dict:  # fmt: skip
    """Tokens per second of plain and constrained beam search over ``sources`` in batches of
    ``batch``, interleaved ``reps`` times (each time the whole list); medians and ranges."""
    from attnlab.decode.search import beam_search

    ids = [translator.src_tokenizer.encode(s)[: translator.max_len] for s in sources]
    wanted = [[translator.phrase(p) for p in row] for row in phrases]
    chunks = [(ids[i : i + batch], wanted[i : i + batch]) for i in range(0, len(ids), batch)]
    options = {"beam_size": translator.decoding.beam_size, "alpha": translator.decoding.alpha}

    def run(constrained: bool) -> int:
        tokens = 0
        for src, cons in chunks:
            found = beam_search(translator.model, src, constraints=cons if constrained else None,
                                **options)  # fmt: skip
            tokens += int(found.lengths.sum())
        return tokens

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        counts = {"plain": run(False), "constrained": run(True)}  # warm-up, and the counts
        seconds: dict[str, list[float]] = {"plain": [], "constrained": []}
        with gc_paused():
            for rep in range(reps):
                for name in ("plain", "constrained") if rep % 2 == 0 else ("constrained", "plain"):
                    start = time.perf_counter()
                    run(name == "constrained")
                    seconds[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    rates = {k: [counts[k] / s for s in v] for k, v in seconds.items()}
    ratios = [c / p for c, p in zip(rates["constrained"], rates["plain"], strict=True)]
    return {
        "batch": batch,
        "threads": threads,
        "sentences": len(sources),
        "tokens": counts,
        "plain_tok_s": statistics.median(rates["plain"]),
        "constrained_tok_s": statistics.median(rates["constrained"]),
        "ratio": statistics.median(rates["constrained"]) / statistics.median(rates["plain"]),
        "ratio_range": [min(ratios), max(ratios)],
        "reps": reps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a translation model directory")
    parser.add_argument(
        "--multi30k",
        type=Path,
        help="Multi30K's directory: its val split (default: $ATTNLAB_MULTI30K, or the cache "
        "that `attnlab download multi30k` and attnlab train fill)",
    )
    parser.add_argument("--src", type=Path, help="source sentences (instead of --multi30k)")
    parser.add_argument("--ref", type=Path, help="their references")
    parser.add_argument("--limit", type=int, default=None, help="the first N sentences")
    parser.add_argument("--beam-size", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--alpha", type=float, default=None, help="default: the recipe's")
    parser.add_argument("--speed-sentences", type=int, default=64,
                        help="constrained sentences timed (64)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions (5)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    args = parser.parse_args(argv)

    from attnlab.data.corpora import read_lines
    from attnlab.decode.options import DecodingOptions
    from attnlab.inference.scores import score
    from attnlab.inference.translator import Translator

    if args.src is not None or args.ref is not None:
        if args.src is None or args.ref is None:
            parser.error("--src and --ref go together")
        src_path, ref_path = args.src, args.ref
    else:
        from attnlab.data.corpora import default_multi30k_dir

        directory = args.multi30k or default_multi30k_dir()
        src_path, ref_path = directory / "val.en.gz", directory / "val.de.gz"
    sources, references = read_lines(src_path), read_lines(ref_path)
    if len(sources) != len(references):
        parser.error(f"--ref: {len(references)} lines for {len(sources)} sources")
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    # The model's own decoding (its recipe's [eval]) unless the flags say otherwise.
    decoding = DecodingOptions.for_model(args.model, beam_size=args.beam_size, alpha=args.alpha)
    translator = Translator.load(args.model, device="cpu", decoding=decoding)
    beam, alpha = translator.decoding.beam_size, translator.decoding.alpha
    print(f"{len(sources):,} sentences of {src_path.name}; beam {beam}, alpha {alpha}", flush=True)

    start = time.perf_counter()
    plain = translator.translate(sources)
    plain_s = time.perf_counter() - start
    phrases = build_constraints(plain, references)
    constrained_rows = [i for i, row in enumerate(phrases) if row]
    count = sum(len(row) for row in phrases)
    print(f"unconstrained: {plain_s:.1f} s; {count:,} constraints on "
          f"{len(constrained_rows):,} sentences", flush=True)  # fmt: skip
    refused: list = []
    start = time.perf_counter()
    guided = translator.translate(sources, constraints=phrases, on_refused=refused.append)
    guided_s = time.perf_counter() - start
    met = sum(p in guided[i] for i, row in enumerate(phrases) for p in row)
    subset_refs = [references[i] for i in constrained_rows]

    def scores(hyps: list[str], refs: list[str]) -> dict:
        s = score(hyps, refs)
        return {"bleu": s.bleu, "chrf": s.chrf, "bleu_signature": s.bleu_signature}

    quality = {
        "unconstrained": scores(plain, references),
        "constrained": scores(guided, references),
        "subset_unconstrained": scores([plain[i] for i in constrained_rows], subset_refs),
        "subset_constrained": scores([guided[i] for i in constrained_rows], subset_refs),
    }
    refused_rows = {r.index for r in refused}
    timed_rows = [i for i in constrained_rows if i not in refused_rows][: args.speed_sentences]
    timed = [sources[i] for i in timed_rows]
    timed_phrases = [phrases[i] for i in timed_rows]
    runs = [
        speed(translator, timed, timed_phrases, batch, threads, args.reps)
        for batch in (1, 32)
        for threads in (1, 2)
    ]
    report = {
        "model": str(args.model),
        "data": src_path.name,  # the file, not the machine's path to it
        "sentences": len(sources),
        "beam_size": beam,
        "alpha": alpha,
        "rule": f"up to {PER_SENTENCE} reference words per sentence, alphabetic, >= {MIN_LETTERS}"
        " letters, missing from the unconstrained output, the longest first",
        "constraints": count,
        "constrained_sentences": len(constrained_rows),
        "met": met,
        "met_percent": 100.0 * met / max(count, 1),
        "refused": [str(r) for r in refused],
        "seconds": {"unconstrained": plain_s, "constrained": guided_s},
        "quality": quality,
        "speed": runs,
        "torch": torch.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    q = quality
    print(f"constraints met: {met:,} of {count:,} ({report['met_percent']:.1f}%); "
          f"refused lines: {len(refused)}")  # fmt: skip
    print(f"{'':28} {'BLEU':>7} {'chrF':>7}")
    for key, label in (
        ("unconstrained", "all, unconstrained"),
        ("constrained", "all, constrained"),
        ("subset_unconstrained", "constrained lines, before"),
        ("subset_constrained", "constrained lines, after"),
    ):
        print(f"{label:28} {q[key]['bleu']:7.2f} {q[key]['chrf']:7.2f}")
    print(f"{'batch':>5} {'threads':>7} {'plain tok/s':>12} {'constr. tok/s':>14} {'ratio':>6} "
          f"{'(min-max)':>12}")  # fmt: skip
    for r in runs:
        low, high = r["ratio_range"]
        rates = f"{r['plain_tok_s']:>12.0f} {r['constrained_tok_s']:>14.0f}"
        print(
            f"{r['batch']:>5} {r['threads']:>7} {rates} {r['ratio']:>6.2f} {low:>5.2f}-{high:.2f}"
        )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
