"""``attnlab translate``: its parser and the command: text, standard input or a file, in
bounded chunks, with constraints, a prefix and scores (:class:`attnlab.inference.translator.
Translator`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..inference.bounds import MAX_TOKENS
from ._args import (
    QUANTIZE_METAVAR,
    add_device_flag,
    add_engine_flag,
    add_guide_flags,
    add_input_bound_flags,
    add_json_flag,
    add_max_new_tokens_flag,
    add_model_flag,
    add_out_flag,
    add_sampling_flags,
    add_threads_flag,
    apply_threads,
    as_flags,
    decoding_of,
    device_of,
    engine_of,
    non_negative,
    positive_int,
)
from ._model import EXIT_REFUSED, TooLongLines, check_kind, model_dirs, resolving


def add_parsers(sub) -> None:
    translate = sub.add_parser(
        "translate",
        help="translate text with a trained model (beam search)",
        description=(
            "Translate TEXT arguments, standard input line by line (no TEXT, or '-'), or a file "
            "(-i), in batches, with beam search (or greedy with --beam-size 1, or sampling with "
            "--sample); one translation per line, in order. A file is read in bounded chunks of "
            "--batch-lines lines (memory stays flat however long it is), with a progress bar on "
            "a terminal; --out (-o) writes the output file atomically (all of it, or nothing), "
            "from -i in chunks kept in OUT.work/ (a killed run resumes; see the guide). "
            "--model may be OUT/model, a checkpoint OUT/checkpoints/step-N or a run OUT. Each "
            "translation is at most --max-new-tokens tokens long (default: its source's length + "
            "50), and never more than the model's max_len; a source is at most max_len tokens "
            "(--too-long). --constraints FILE gives phrases each translation must contain, "
            "--prefix TEXT the start it must have; --scores (or --json) says how sure the model "
            "is of each token."
        ),
    )
    add_model_flag(translate, many=True)
    translate.add_argument("text", nargs="*", help="sentences; none or '-' reads stdin")
    translate.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        help="beam; default: the model's recipe ([eval] of its job.json), else 4",
    )
    translate.add_argument(
        "--max-tokens",
        type=positive_int,
        default=MAX_TOKENS,
        help=f"source tokens per batch ({MAX_TOKENS})",
    )
    translate.add_argument(
        "--batch-lines", type=positive_int, default=64, help="stdin lines per batch (64)"
    )
    add_device_flag(translate)
    add_engine_flag(translate)
    add_threads_flag(translate)
    translate.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        metavar=QUANTIZE_METAVAR,
        help="int8: decode with int8 weights (CPU, float32 models; faster for batches)",
    )
    translate.add_argument(
        "--alpha",
        type=non_negative,
        default=None,
        help="beam search's length penalty; default: the model's recipe, else 0.6",
    )
    add_max_new_tokens_flag(translate)
    translate.add_argument(
        "--n-best",
        type=positive_int,
        default=None,
        metavar="N",
        help="the N best translations of each line (N <= --beam-size), best first, one a line "
        "as SCORE<tab>TEXT; SCORE is log P / length penalty",
    )
    add_sampling_flags(translate)
    translate.add_argument("--seed", type=int, default=None, help="--sample: random seed")
    add_guide_flags(translate)
    add_json_flag(translate)
    translate.add_argument(
        "-i", "--input", default=None, metavar="FILE", help="translate the lines of FILE"
    )
    add_input_bound_flags(translate)
    add_out_flag(translate, "write the translations to this file instead of stdout", short=True)
    translate.set_defaults(func=resolving(cmd_translate))


def _check_translate_flags(args: argparse.Namespace) -> None:
    """The flags of ``translate`` that exclude or need each other: before any model work."""
    names = ("--temperature", "--top-k", "--top-p", "--seed")
    sampling = (args.temperature != 1.0, args.top_k, args.top_p, args.seed)
    given = [n for n, v in zip(names, sampling, strict=True) if v is not None and v is not False]
    if given and not args.sample:
        raise ValueError(f"{', '.join(given)}: only with --sample")
    if args.input and args.text:
        raise ValueError("--input: give either a FILE or TEXT arguments, not both")
    for flag, path in (("--input", args.input), ("--constraints", args.constraints)):
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"{flag}: {path}: no such file")
    if args.out and args.input and Path(args.out).resolve() == Path(args.input).resolve():
        raise ValueError("--out: the same file as --input; choose another")


def _count_lines(path: str) -> int:
    """Lines in ``path`` (a last line without its end counts), read in blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


class _Constraints:
    """The phrases of ``--constraints FILE``, one line per input line, read in step with the
    input; an input with more lines than the file is an error naming both."""

    def __init__(self, path: str, errors: str, inputs: int | None, name: str) -> None:
        from ._lines import read_lines

        self.path = path
        lines = _count_lines(path)
        if inputs is not None and inputs != lines:
            raise ValueError(
                f"--constraints: {path} has {lines:,} lines, but {name} has {inputs:,}; one "
                f"line of tab-separated phrases per input line"
            )
        self.lines = read_lines(path, "--constraints", errors)
        self.read = 0

    def take(self, count: int) -> list[list[str]]:
        out = []
        for _ in range(count):
            line = next(self.lines, None)
            if line is None:
                raise ValueError(
                    f"--constraints: {self.path} ends after {self.read:,} lines, but the input "
                    f"goes on; one line of tab-separated phrases per input line"
                )
            self.read += 1
            out.append(line.split("\t") if line else [])
        return out

    def finish(self) -> None:
        if next(self.lines, None) is not None:
            raise ValueError(
                f"--constraints: {self.path} has more lines than the input ({self.read:,}); "
                f"one line of tab-separated phrases per input line"
            )


def _scored_line(best, n_best: bool) -> str:
    """``--scores``'s text after a translation: log P, the score, the token log-probabilities."""
    values = " ".join(f"{v:.4f}" for v in best.token_log_probs)
    if n_best:
        return f"{best.score:.4f}\t{best.text}\t{best.log_prob:.4f}\t{values}"
    return f"{best.text}\t{best.log_prob:.4f}\t{best.score:.4f}\t{values}"


def cmd_translate(args: argparse.Namespace) -> int:
    from .._io import atomic_write
    from ..decode.options import DecodingOptions
    from ..inference import corpus
    from ..inference.translator import Translator
    from ._lines import check_utf8, lines_of, read_lines

    models = model_dirs(args)  # several: an ensemble
    args.model = models[0]
    _check_translate_flags(args)
    engine = engine_of(args, len(models))  # its refusals before any model work
    apply_threads(args)
    if args.input and args.errors == "strict":
        check_utf8(args.input, "--input")  # every line, before any model work
    device = device_of(args.device)
    for model in models:
        check_kind(model, {"transformer"}, "translate", "--model")
    notice = None
    drawing = {"sample": args.sample, "temperature": args.temperature, "top_k": args.top_k}
    drawing.update(top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens)
    if args.sample:  # no search: the flags' length penalty (else the default) scores the draws
        try:
            decoding = DecodingOptions().updated(
                beam_size=args.beam_size, alpha=args.alpha, n_best=args.n_best, **drawing
            )
            decoding.check_constraints(bool(args.constraints))
        except ValueError as e:
            raise ValueError(as_flags(str(e))) from None
    else:  # the beam and its length penalty: given, or the model's own, wide enough
        constrained = bool(args.constraints)
        decoding, notice = decoding_of(args, "translate", args.n_best or 1, constrained)
        decoding = decoding.updated(**drawing)
    options = {"max_tokens": args.max_tokens, "too_long": args.too_long, "engine": engine}
    if getattr(args, "quantize", None):
        options["quantize"] = args.quantize
    from_text = bool(args.text) and args.text != ["-"]
    source = "TEXT" if from_text else f"--input {args.input} line" if args.input else None
    constraints = None
    if args.constraints:
        inputs = len(args.text) if from_text else _count_lines(args.input) if args.input else None
        name = "TEXT" if from_text else f"--input {args.input}"
        constraints = _Constraints(args.constraints, args.errors, inputs, name)
    loaded = Translator.load(models, device=device, decoding=decoding, **options)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    work = None  # in chunks, kept in OUT.work/: resumable
    if args.input and args.out and not args.sample:
        work = Path(args.out).with_name(Path(args.out).name + ".work")
    refused_here: set[int] = set()  # a resumed run counts the others in OUT.work/REFUSED
    record = _recorder(work and work / REFUSED, refused_here)
    too_long = TooLongLines("translate", source or "standard input line", record)

    def translate(batch: list[str], numbers: list[int], phrases=None) -> list[str]:  # lines from 1
        if phrases is None and constraints is not None:
            phrases = constraints.take(len(batch))
        at = lambda report: dataclasses.replace(report, index=numbers[report.index] - 1)  # noqa: E731
        found = loaded.hypotheses(
            batch,
            constraints=phrases,
            prefixes=args.prefix,
            on_too_long=lambda report: too_long(at(report)),
            on_refused=lambda report: too_long.unmet(at(report)),
            scored=args.json or args.scores or args.n_best is not None,  # else texts alone
        )
        if args.json:
            return [
                json.dumps(_json_line(number, text, row, args.n_best), ensure_ascii=False)
                for number, text, row in zip(numbers, batch, found, strict=True)
            ]
        if args.n_best is None:
            if args.scores:
                return [_scored_line(row[0], False) if row else "" for row in found]
            return [row[0].text if row else "" for row in found]
        if args.scores:
            return ["\n".join(_scored_line(h, True) for h in row) for row in found]
        return ["\n".join(f"{h.score:.4f}\t{h.text}" for h in row) for row in found]

    def translate_all(lines: Iterable[str], write: Callable[[str], object]) -> Iterator[list[str]]:
        """Translate ``lines`` in chunks, writing each translation; yield each chunk."""
        first = 1
        for batch in corpus.windows(lines, args.batch_lines):
            for line in translate(batch, list(range(first, first + len(batch)))):
                write(line + "\n")
            first += len(batch)
            yield batch

    def translations(write: Callable[[str], object]) -> None:
        """Every translation to ``write``, a line each; then --constraints must end too."""
        if from_text:
            for line in translate(args.text, list(range(1, len(args.text) + 1))):
                write(line + "\n")
        elif not args.input:
            stdin = getattr(sys.stdin, "buffer", sys.stdin)  # a test's StringIO has no buffer
            for _ in translate_all(lines_of(stdin, "standard input", args.errors), write):
                pass
        else:
            from tqdm import tqdm

            size = Path(args.input).stat().st_size
            lines = read_lines(args.input, "--input", args.errors)
            with tqdm(
                total=size,
                unit="B",
                unit_scale=True,
                desc="translate",
                disable=not sys.stderr.isatty(),
                file=sys.stderr,
            ) as bar:
                for batch in translate_all(lines, write):
                    bar.update(sum(len(line.encode("utf-8")) + 1 for line in batch))
        if constraints is not None:
            constraints.finish()

    def emit(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    if work is not None:
        from ..data.progress import progress_printer
        from ..data.textfiles import sha256_file

        files = {
            f: p for f, p in (("--input", args.input), ("--constraints", args.constraints)) if p
        }
        rows = lambda: zip(*(read_lines(p, f, args.errors) for f, p in files.items()), strict=True)  # noqa: E731
        digests = [sha256_file(path) for path in files.values()]
        digests += [sha256_file(Path(m) / "model.safetensors") for m in models]  # resolved
        settings = {k: v for k, v in vars(args).items() if k not in ("func", "out", "debug")}
        key = json.dumps([digests, settings], sort_keys=True, default=str)  # in OUT.work/plan.json

        def chunk(numbers: list[int], rows: list) -> list[str]:
            phrases = [r[1].split("\t") if r[1] else [] for r in rows] if constraints else None
            return translate([r[0] for r in rows], [n + 1 for n in numbers], phrases)

        corpus.translate_chunks(
            rows, _count_lines(args.input), work=work, translate=chunk,
            note=lambda line: print(f"attnlab translate: {line}", file=sys.stderr, flush=True),
            chunk_size=corpus.CHUNK_SIZE, key=key,
            progress=progress_printer(args.out, every_s=10.0) if sys.stderr.isatty() else None,
            progress_lines=args.batch_lines,
        )  # fmt: skip

        def assemble(path: str) -> None:
            with open(path, "w", encoding="utf-8") as out:
                for _, line in corpus.assembled(rows, work):
                    out.write(line + "\n")

        atomic_write(args.out, assemble)
        earlier = _earlier_refusals(work / REFUSED, refused_here)
        shutil.rmtree(work)
        if earlier:
            return EXIT_REFUSED
    elif args.out:

        def fill(path: str) -> None:
            with open(path, "w", encoding="utf-8") as out:
                translations(out.write)

        atomic_write(args.out, fill)
    else:
        translations(emit)
    return EXIT_REFUSED if too_long.refused else 0


#: The refusals of a chunked run, a line each (``index<TAB>message``), in ``OUT.work/``.
REFUSED = "refused.tsv"


def _recorder(path: Path | None, mine: set[int]) -> Callable[[int, str], None]:
    """``record(index, message)`` of a chunked run: each refusal's index kept in ``mine`` and
    appended to ``path`` (made durable before its chunk is), so that a resumed run knows of
    the lines an earlier one refused."""

    def record(index: int, message: str) -> None:
        mine.add(index)
        if path is not None:
            with open(path, "a", encoding="utf-8") as log:
                log.write(f"{index}\t{message}\n")
                log.flush()
                os.fsync(log.fileno())

    return record


def _earlier_refusals(path: Path, mine: set[int]) -> int:
    """The lines ``path`` holds as refused (by any run; a line twice where its chunk was
    decoded again) but this run did not refuse (``mine``): each said again, and counted."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    earlier = {int(i): m for i, _, m in (line.partition("\t") for line in lines)}
    for index in sorted(set(earlier) - mine):
        print(f"{earlier[index]} (refused by an earlier run)", file=sys.stderr, flush=True)
    return len(set(earlier) - mine)


def _json_line(number: int, source: str, found: list, n_best: int | None) -> dict:
    """``translate --json``'s object for one input line."""
    line: dict = {"line": number, "source": source}
    if not found:
        return {**line, "translation": "", "refused": True}
    best = found[0]
    line.update(
        {"translation": best.text, **{k: v for k, v in best.to_dict().items() if k != "text"}}
    )
    if n_best is not None:
        line["n_best"] = [h.to_dict() for h in found]
    return line
