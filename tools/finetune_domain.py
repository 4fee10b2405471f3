"""Fine-tune a translation model on a domain it has never seen, and measure what it gained and
what it forgot: the table of docs/pretrained.md ("Fine-tuning on your own data").

The new domain is the numbers task (English number words to German ones, ``attnlab train --task
numbers``), written out as plain parallel text files, the form a user's own data takes
(``OUT/data/{train,valid,test}.{en,de}``). The starting model keeps its vocabulary: fine-tuning
runs ``attnlab train --init-from MODEL --task files`` over those files with the fine-tuning
recipe (src/attnlab/recipes/finetune.toml), plus any ``--lr`` / ``--max-steps`` given.

Reported, before and after, each with the final test's decoding (beam 4, alpha 1.0 unless
``--beam-size`` / ``--alpha``):

* exact match and BLEU on the numbers test split (500 numbers the run never saw);
* exact match and BLEU on the numbers validation split (what recipes are chosen on);
* BLEU and chrF on Multi30K's validation split: what the model forgot of its first domain;
* the minutes the fine-tuning took.

The table goes to standard output and, with the run's numbers, to ``OUT/finetune.json``.

Run::

    .venv/bin/python tools/finetune_domain.py --model runs/multi30k-en-de/model \\
        --out runs/finetune-numbers

Multi30K is read from ``--multi30k DIR``, else where attnlab looks for it (``$ATTNLAB_MULTI30K``,
else the download cache that ``attnlab download multi30k`` fills); nothing is downloaded here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from attnlab._io import write_json
from attnlab.data.corpora import multi30k as load_multi30k
from attnlab.decode.options import DecodingOptions
from attnlab.inference.scores import score
from attnlab.inference.translator import Translator
from attnlab.jobs import Job, train_job
from attnlab.tasks.numbers import Numbers

SPLITS = ("train", "valid", "test")


def write_numbers_files(
    directory: Path, seed: int, replay: list[tuple[str, str]] = ()
) -> dict[str, str]:
    """The numbers task's splits (the numbers recipe's: 0..9,999, 500 valid, 500 test) as
    parallel text files in ``directory``, with ``replay`` pairs of the old domain appended to
    the training files; the ``[task]`` table of a ``files`` job over them."""
    corpus = Numbers(high=9999, valid_size=500, test_size=500, seed=seed)
    data = {split: list(corpus.load()[split]) for split in SPLITS}
    data["train"] += list(replay)
    directory.mkdir(parents=True, exist_ok=True)
    table = {"name": "files", "src_lang": "en", "tgt_lang": "de"}
    for split in SPLITS:
        for side, index in (("src", 0), ("tgt", 1)):
            path = directory / f"{split}.{('en', 'de')[index]}"
            lines = "".join(pair[index] + "\n" for pair in data[split])
            path.write_text(lines, encoding="utf-8")
            table[f"{split}_{side}"] = str(path)
    return table


def scores(translator: Translator, pairs: list[tuple[str, str]]) -> dict[str, float]:
    result = score(translator.translate([s for s, _ in pairs]), [t for _, t in pairs])
    return {"bleu": result.bleu, "chrf": result.chrf, "exact_match": result.exact_match}


def measure(model_dir: Path, numbers: dict, multi30k: list, beam: int, alpha: float) -> dict:
    """Scores of ``model_dir`` on the numbers test and validation splits and on Multi30K's
    validation split."""
    translator = Translator.load(
        model_dir, decoding=DecodingOptions(beam_size=beam, alpha=alpha), device="cpu"
    )
    return {
        "numbers_test": scores(translator, numbers["test"]),
        "numbers_valid": scores(translator, numbers["valid"]),
        "multi30k_valid": scores(translator, multi30k),
    }


def _pairs(directory: Path, split: str) -> list[tuple[str, str]]:
    src = (directory / f"{split}.en").read_text(encoding="utf-8").splitlines()
    tgt = (directory / f"{split}.de").read_text(encoding="utf-8").splitlines()
    return list(zip(src, tgt, strict=True))


def table(before: dict, after: dict, minutes: float) -> str:
    rows = [
        ("numbers test: exact match", "numbers_test", "exact_match", "{:.1%}"),
        ("numbers test: BLEU", "numbers_test", "bleu", "{:.2f}"),
        ("numbers valid: exact match", "numbers_valid", "exact_match", "{:.1%}"),
        ("Multi30K valid: BLEU (forgetting)", "multi30k_valid", "bleu", "{:.2f}"),
        ("Multi30K valid: chrF", "multi30k_valid", "chrf", "{:.2f}"),
    ]
    lines = ["| | before | after |", "|---|---|---|"]
    for label, split, key, form in rows:
        lines.append(
            f"| {label} | {form.format(before[split][key])} | {form.format(after[split][key])} |"
        )
    lines.append(f"| fine-tuning time | | {minutes:.1f} min |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the model to start from")
    parser.add_argument(
        "--multi30k",
        default=None,
        help="the Multi30K data directory (default: $ATTNLAB_MULTI30K, else the cache that "
        "`attnlab download multi30k` fills)",
    )
    parser.add_argument("--out", required=True, help="the directory of the run and its table")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (recipe's)")
    parser.add_argument("--max-steps", type=int, default=None, help="steps (recipe's)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (recipe's)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--limit", type=int, default=None, help="score only the first N sentences (a smoke run)"
    )
    parser.add_argument(
        "--replay",
        type=int,
        default=0,
        help="append the first N Multi30K training pairs to the fine-tuning data (against "
        "forgetting; default 0)",
    )
    args = parser.parse_args(argv)

    out = Path(args.out)
    old_domain = load_multi30k(args.multi30k, download=False)
    task = write_numbers_files(out / "data", args.seed, old_domain["train"][: args.replay])
    numbers = {split: _pairs(out / "data", split)[: args.limit] for split in ("valid", "test")}
    multi30k = old_domain["valid"][: args.limit]
    print(f"starting model: {args.model}", flush=True)
    before = measure(Path(args.model), numbers, multi30k, args.beam_size, args.alpha)
    train: dict[str, Any] = {"seed": args.seed}
    if args.lr is not None:
        train["lr"] = args.lr
    if args.max_steps is not None:
        train["max_steps"] = args.max_steps
    if args.warmup is not None:
        train["warmup"] = args.warmup
    job = Job.from_dict(
        {
            "task": task,
            "model": {"init_from": str(args.model)},
            "train": train,
            "eval": {"beam_size": args.beam_size, "alpha": args.alpha},
        }
    )
    started = time.perf_counter()
    result = train_job(job, out / "run", progress=False, log=lambda line: print(f"  {line}"))
    minutes = (time.perf_counter() - started) / 60
    after = measure(out / "run" / "model", numbers, multi30k, args.beam_size, args.alpha)
    report = {
        "model": str(args.model),
        "train": {k: job.train[k] for k in sorted(job.train)},
        "decoding": {"beam_size": args.beam_size, "alpha": args.alpha},
        "replay": args.replay,
        "before": before,
        "after": after,
        "fine_tuning_minutes": minutes,
        "training": result.get("training", {}),
    }
    write_json(out / "finetune.json", report)
    print(table(before, after, minutes))
    print(json.dumps({"before": before, "after": after}, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
