"""The inference engines one sentence at a time (issue 59 item 8): CTranslate2 called directly
against attnlab's Translator on either engine, greedy, on the same converted model.

    python benchmarks/engine.py [--model runs/numbers/model] [--threads 1,2] [--passes 7]
        [--sentences 60] [--quick] [--out benchmarks/results/engine.json]

Two models: the trained ``--model`` directory, and a random one of a small translation model's
shape (d_model 256, 4 heads, d_ff 1024, 4 + 4 layers, seeded) with that directory's tokenizers
and ``max_len`` (its outputs are noise, so most run to their length limit: source + 50 tokens,
at most ``max_len``). For each model and torch thread count (CTranslate2's ``intra_threads``
the same), the contenders translate the same English numbers (the serve benchmark's), one
sentence a call:

* ``ct2_direct`` (the anchor): ``ctranslate2.Translator`` on the engine's converted cache
  entry, source tokens in, target tokens out, with the engine's settings (greedy, its length
  limit and suppressed tokens); the tokens are made before timing.
* ``ct2_direct_scored``: the same, then ``score_batch`` of its output, as the engine does for
  each output's token log-probabilities (informational: what that costs).
* ``torch``: ``Translator(engine="torch")``, one ``translate([sentence])`` a sentence.
* ``ctranslate2``: ``Translator(engine="ctranslate2")``, the same way.
* ``ctranslate2_batch1``: ``Translator(engine="ctranslate2", max_tokens=1)`` given every
  sentence in one call: each batch is one sentence, as ``attnlab translate --engine
  ctranslate2 --max-tokens 1`` (or ``--batch-lines 1``) decodes a file.

Each pass asks every contender for every sentence; the contenders take turns pass by pass, in a
rotating order. Reported: milliseconds a sentence, the best pass (the fastest of ``--passes``,
after one warm-up pass) and the median; each contender's best over the anchor's best, measured
in the same run; and how many of the sentences each contender translates to the very tokens
of the torch engine (all must: the exit status is 1 otherwise). The issue's goal, printed with
PASS or FAIL and never asserted: ``ctranslate2_batch1`` within 15% of ``ct2_direct``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import attnlab
from attnlab.inference.translator import Translator, encode_sources
from common import cpu_model, gc_paused, write_json
from serve_load import sentences

DEFAULT_OUT = Path(__file__).parent / "results" / "engine.json"
ANCHOR = "ct2_direct"
CONTENDERS = (ANCHOR, "ct2_direct_scored", "torch", "ctranslate2", "ctranslate2_batch1")
#: The issue's goal: the Translator at batch 1 on the ctranslate2 engine, over CTranslate2 alone.
BATCH1_GOAL = 1.15
#: A small translation model's shape (as the serve benchmark's docs/serve.md model).
SHAPE = {"d_model": 256, "num_heads": 4, "d_ff": 1024, "num_encoder_layers": 4,
         "num_decoder_layers": 4}  # fmt: skip


def random_model(base: Translator, seed: int = 0) -> attnlab.Transformer:
    """A seeded random Transformer of :data:`SHAPE`, with ``base``'s vocabularies, special ids
    and ``max_len``, in eval mode without dropout."""
    from attnlab.models.config import TransformerConfig

    data = {**base.model.config.to_dict(), **SHAPE, "dropout": 0.0}
    torch.manual_seed(seed)
    return attnlab.Transformer(TransformerConfig.from_dict(data)).eval()


def direct(engine: Any, threads: int, scored: bool) -> Callable[[list], list[list[int]]]:
    """``run(sources) -> outputs``: CTranslate2 itself on ``engine``'s converted model (ids
    with EOS, as the Translator's), one source a call; ``sources`` are ``(tokens, limit)``."""
    import ctranslate2

    translator = ctranslate2.Translator(
        str(engine.path), device="cpu", compute_type=engine.compute_type, intra_threads=threads
    )
    settings = dict(
        beam_size=1,
        num_hypotheses=1,
        min_decoding_length=0,
        max_input_length=0,
        suppress_sequences=engine.banned,
        return_end_token=True,
    )
    ids, eos = engine.tgt_ids, engine.tgt_tokens[engine.eos_id]

    def run(sources: list[tuple[list[str], int]]) -> list[list[int]]:
        out = []
        for tokens, limit in sources:
            found = translator.translate_batch([tokens], max_decoding_length=limit, **settings)
            target = found[0].hypotheses[0][:limit]
            if scored:  # score_batch appends EOS itself
                words = target[:-1] if target and target[-1] == eos else target
                translator.score_batch([tokens], [words], max_input_length=0)
            out.append([ids[t] for t in target])
        return out

    return run


def through(translator: Translator, one_call: bool) -> Callable[[list[str]], list[list[int]]]:
    """``run(texts) -> outputs``: the Translator's ids (EOS included) of each text, one call a
    text, or (``one_call``) all in one call."""

    def run(texts: list[str]) -> list[list[int]]:
        # scored=False: what `attnlab translate` asks for plain text (no second pass)
        if one_call:
            return [found[0].ids for found in translator.hypotheses(texts, scored=False)]
        return [translator.hypotheses([text], scored=False)[0][0].ids for text in texts]

    return run


def measure(
    name: str, model: attnlab.Transformer, base: Translator, texts: list[str], threads: int,
    passes: int,
) -> dict[str, Any]:  # fmt: skip
    """Every contender on ``model`` at ``threads`` threads: times, outputs, ratios, goal."""
    torch.set_num_threads(threads)  # before the engines are made: CTranslate2's intra_threads
    src, tgt = base.src_tokenizer, base.tgt_tokenizer
    options = base.decoding.updated(beam_size=1)
    made = {
        engine: Translator(model, src, tgt, decoding=options, engine=engine)
        for engine in ("torch", "ctranslate2")
    }
    batch1 = Translator(model, src, tgt, decoding=options, engine="ctranslate2", max_tokens=1)
    engine = made["ctranslate2"].ct2
    encoded = encode_sources(src, texts, base.max_len, "cut", None)[0]
    sources = [
        ([engine.src_tokens[t] for t in ids], options.output_limit(len(ids), base.max_len))
        for ids in encoded
    ]
    plain, scored = direct(engine, threads, False), direct(engine, threads, True)
    by_torch, by_ct2 = through(made["torch"], False), through(made["ctranslate2"], False)
    by_batch1 = through(batch1, True)
    runs: dict[str, Callable[[], list[list[int]]]] = {
        ANCHOR: lambda: plain(sources),
        "ct2_direct_scored": lambda: scored(sources),
        "torch": lambda: by_torch(texts),
        "ctranslate2": lambda: by_ct2(texts),
        "ctranslate2_batch1": lambda: by_batch1(texts),
    }
    outputs = {key: run() for key, run in runs.items()}  # the warm-up pass
    seconds: dict[str, list[float]] = {key: [] for key in runs}
    names = list(runs)
    with gc_paused():
        for i in range(passes):
            shift = i % len(names)
            for key in names[shift:] + names[:shift]:
                start = time.perf_counter()
                runs[key]()
                seconds[key].append(time.perf_counter() - start)
    n = len(texts)
    found = {
        key: {
            "ms_per_sentence_best": round(min(s) * 1e3 / n, 3),
            "ms_per_sentence_median": round(statistics.median(s) * 1e3 / n, 3),
            "passes_s": [round(x, 5) for x in s],
        }
        for key, s in seconds.items()
    }
    anchor = found[ANCHOR]["ms_per_sentence_best"]
    reference = outputs["torch"]
    equal = {
        key: sum(a == b for a, b in zip(out, reference, strict=True))
        for key, out in outputs.items()
    }
    batch1_ratio = round(found["ctranslate2_batch1"]["ms_per_sentence_best"] / anchor, 3)
    return {
        "model": name,
        "config": {k: model.config.to_dict()[k] for k in (*SHAPE, "max_len")},
        "threads": threads,
        "sentences": n,
        "output_tokens": sum(map(len, reference)),
        "ended_with_eos": sum(bool(ids) and ids[-1] == model.config.eos_id for ids in reference),
        "contenders": found,
        "ratio_to_anchor": {
            key: round(entry["ms_per_sentence_best"] / anchor, 3) for key, entry in found.items()
        },
        "ctranslate2_speedup_over_torch": round(
            found["torch"]["ms_per_sentence_best"] / found["ctranslate2"]["ms_per_sentence_best"], 2
        ),
        "equal_to_torch": equal,
        "mismatches": {
            key: [t for t, a, b in zip(texts, out, reference, strict=True) if a != b][:3]
            for key, out in outputs.items()
            if equal[key] != n
        },
        "goal_batch1": {
            "ratio": batch1_ratio,
            "target": f"<= {BATCH1_GOAL}",
            "passed": batch1_ratio <= BATCH1_GOAL,
        },
    }


def print_result(r: dict[str, Any]) -> None:
    c = r["config"]
    print(
        f"\n{r['model']} (d_model {c['d_model']}, {c['num_encoder_layers']}+"
        f"{c['num_decoder_layers']} layers, max_len {c['max_len']}), {r['threads']} thread(s), "
        f"greedy, {r['sentences']} sentences one at a time ({r['output_tokens']} output tokens, "
        f"{r['ended_with_eos']} ended by EOS)"
    )
    print("  contender            ms/sentence best (median)  / ct2_direct  same tokens as torch")
    for key, entry in r["contenders"].items():
        best, median = entry["ms_per_sentence_best"], entry["ms_per_sentence_median"]
        print(
            f"  {key:19s}  {best:9.3f} ({median:.3f})          {r['ratio_to_anchor'][key]:8.3f}x"
            f"  {r['equal_to_torch'][key]}/{r['sentences']}"
        )
    goal = r["goal_batch1"]
    print(
        f"  ctranslate2 over torch (the Translator, one sentence a call): "
        f"{r['ctranslate2_speedup_over_torch']}x"
    )
    print(
        f"  goal: the Translator at batch 1 on ctranslate2 {goal['ratio']}x CTranslate2 direct "
        f"({goal['target']}): {'PASS' if goal['passed'] else 'FAIL'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/numbers/model", help="a trained model directory")
    parser.add_argument("--threads", default="1,2", help="thread counts, a list (1,2)")
    parser.add_argument("--passes", type=int, default=7, help="timed passes (best is reported)")
    parser.add_argument("--sentences", type=int, default=60, help="sentences a pass (60)")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 8 sentences, 1 pass, 1 thread"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.passes, args.threads = 8, 1, "1"
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model: {args.model}: no such directory (run `make demo` first)")
    import ctranslate2

    started = time.perf_counter()
    threads = [int(t) for t in args.threads.split(",")]
    texts = sentences(args.sentences)
    base = Translator.load(args.model, device="cpu")
    models = {"trained": base.model.eval(), "random_d256_4+4": random_model(base)}
    results = []
    for count in threads:
        for name, model in models.items():
            results.append(measure(name, model, base, texts, count, args.passes))
            print_result(results[-1])
    wrong = [(r["model"], r["threads"], r["mismatches"]) for r in results if r["mismatches"]]
    wall = time.perf_counter() - started
    report = {
        "benchmark": "engine",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "model_dir": str(args.model),
        "torch_version": torch.__version__,
        "ctranslate2_version": ctranslate2.__version__,
        "attnlab_version": attnlab.__version__,
        "python_version": platform.python_version(),
        "cpu": {"model": cpu_model(), "logical_cpus": os.cpu_count()},
        "decoding": "greedy (beam 1), each output at most source + 50 tokens and max_len",
        "timing": (
            f"ms a sentence: the best of {args.passes} passes (after one warm-up pass), each "
            f"pass every sentence once, one at a time; the median pass beside it"
        ),
        "anchor": ANCHOR,
        "threads": threads,
        "passes": args.passes,
        "results": results,
        "all_outputs_equal": not wrong,
        "wall_time_s": round(wall, 1),
    }
    write_json(args.out, report)
    print(f"\nwall time {wall:.1f} s; wrote {args.out}")
    for model, count, mismatches in wrong:
        print(f"FAILED: {model}, {count} thread(s): outputs differ from torch's: {mismatches}",
              file=sys.stderr)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
