"""The arguments that several command groups share: their types, and one function per shared
flag (one spelling, metavar, type and help for each concept)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..decode.options import DecodingOptions


def parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 4,2, got {text!r}"
        ) from None
    if not lengths or min(lengths) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative lengths, got {text!r}")
    return lengths


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def number_in(text: str, accept: Callable[[float], bool], expected: str) -> float:
    """``text`` as a float that ``accept`` takes (NaN never does), else argparse's error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def probability(text: str) -> float:
    return number_in(text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def non_negative(text: str) -> float:
    return number_in(text, lambda v: 0 <= v < float("inf"), "a finite number >= 0")


def positive_number(text: str) -> float:
    return number_in(text, lambda v: 0 < v < float("inf"), "a finite number > 0")


#: ``--device``: the same choices, default and help on every command that runs a model.
DEVICE_CHOICES = ("auto", "cpu", "cuda")
DEVICE_HELP = "auto (default): CUDA when available, else cpu"


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--device`` flag (default None: ``auto``, or for ``train``
    the job's ``[train] device``)."""
    parser.add_argument("--device", choices=DEVICE_CHOICES, default=None, help=DEVICE_HELP)


def device_of(value: str | None) -> str:
    """The device ``--device VALUE`` names: ``cpu`` or ``cuda`` (None and ``auto``: CUDA when
    available). ValueError naming --device when CUDA is asked for but not available."""
    import torch

    if value in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if value == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device: cuda was asked for, but CUDA is not available on this machine "
            "(torch finds no CUDA device); use --device cpu or auto"
        )
    if value not in DEVICE_CHOICES:
        raise ValueError(f"--device: expected one of {', '.join(DEVICE_CHOICES)}, got {value!r}")
    return value


# -- one spelling per concept ------------------------------------------------------------------
# Each concept that several commands share has one flag, added by one function here, so that
# its spelling, metavar, type and unit cannot drift apart.

#: ``--model``'s help, the same on every command that reads one model.
MODEL_HELP = (
    "the model: a model directory (OUT/model), a checkpoint (OUT/checkpoints/step-N) or a run "
    "(OUT); required"
)

#: ``--model``'s help where it may be repeated (translate, evaluate).
MODELS_HELP = MODEL_HELP + (
    "; repeat it to decode with the ensemble of several models (the mean of their "
    "probabilities at every step; they share their tokenizers, and the first one's recipe "
    "gives the default decoding)"
)

#: ``--max-new-tokens``'s help: its unit is generated tokens, the start token not counted.
MAX_NEW_TOKENS_HELP = (
    "the most tokens to generate after the start token (and the prompt, if any); default: "
    "the source length + 50 for a translation model, 50 for a language model"
)

#: ``--quantize``'s help prefix (each command's engine takes its own weight types).
QUANTIZE_METAVAR = "TYPE"

#: ``--engine``'s choices: attnlab.inference.engines.ENGINES (tested equal), the first the default.
ENGINE_CHOICES = ("torch", "ctranslate2")


def add_engine_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--engine`` flag: which engine decodes (default torch)."""
    parser.add_argument(
        "--engine",
        choices=ENGINE_CHOICES,
        default="torch",
        help="torch (default): attnlab's searches, every option; ctranslate2: CTranslate2 (pip "
        "install 'attnlab[ctranslate2]'; the model is converted once into attnlab's cache), "
        "without ensembles, constraints or attention; its beam ranks by --alpha as torch's does",
    )


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--threads N``: the CPU threads decoding uses, the same on
    both engines (torch's intra-op threads; CTranslate2's ``intra_threads``, which it reads
    from torch's); default torch's own choice (``OMP_NUM_THREADS`` or the cores)."""
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="CPU threads for decoding, on either engine (default: torch's, OMP_NUM_THREADS "
        "or the cores)",
    )


def apply_threads(args: argparse.Namespace) -> None:
    """``--threads``, where given, as this process's thread count (before a model loads)."""
    if getattr(args, "threads", None) is not None:
        import torch

        torch.set_num_threads(args.threads)


def add_model_flag(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """Give ``parser`` the shared, required ``--model DIR`` (dest ``model``). ``many``: the
    flag may be repeated for an ensemble (``args.models`` then lists every directory, and
    ``args.model`` is the first)."""
    if not many:
        parser.add_argument("--model", required=True, default=None, metavar="DIR", help=MODEL_HELP)
        return
    parser.add_argument(
        "--model",
        required=True,
        action="append",
        default=None,
        metavar="DIR",
        help=MODELS_HELP,
    )


def add_out_flag(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    required: bool = False,
    short: bool = False,
) -> None:
    """Give ``parser`` the shared ``--out PATH`` (dest ``out``; ``-o`` too when ``short``);
    ``help`` says what is written there and its default."""
    names = ("-o", "--out") if short else ("--out",)
    parser.add_argument(*names, required=required, default=None, metavar="PATH", help=help)


def add_overwrite_flag(
    parser: argparse.ArgumentParser, help: str = "replace --out if it exists"
) -> None:
    """Give ``parser`` the shared ``--overwrite`` (dest ``overwrite``, default False)."""
    parser.add_argument("--overwrite", action="store_true", help=help)


def add_max_new_tokens_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--max-new-tokens N`` (dest ``max_new_tokens``, default None:
    the decoder's own budget, see `MAX_NEW_TOKENS_HELP`)."""
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        metavar="N",
        help=MAX_NEW_TOKENS_HELP,
    )


def add_causal_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--causal/--no-causal`` (dest ``causal``, default True)."""
    parser.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also apply the look-ahead (causal) mask of decoder self-attention; --no-causal: "
        "padding masks only (default: --causal)",
    )


def add_compile_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the training step through torch.compile (default: the job's [train] compile, "
        "off: on a CPU the compiled step is slower than eager, see docs/benchmarks.md)",
    )


def add_seed_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--seed N`` (default 0)."""
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (0)")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--json`` (dest ``json``)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text: one object (translate: one per input line, with the "
        "tokens and their log-probabilities)",
    )


def decoding_of(
    args: argparse.Namespace, command: str, n_best: int = 1, constrained: bool = False
) -> tuple[DecodingOptions, str | None]:
    """The :class:`~attnlab.decode.options.DecodingOptions` for ``command`` on ``args.model``:
    ``--beam-size`` and ``--alpha`` where given, else what the model directory carries
    (:meth:`~attnlab.decode.options.DecodingOptions.carried_by`), asked for ``n_best``
    hypotheses (and constraints where ``constrained``): a carried beam is widened to hold them
    (:meth:`~attnlab.decode.options.DecodingOptions.widened`), a given one must. With them, the
    line for stderr that says which were used and where they came from (to print once the
    model has loaded), where a carried value decides the search: None when both were given, or
    for an alpha under a given beam of 1 (greedy search has no length penalty)."""
    from ..decode.options import DecodingOptions

    carried, source = DecodingOptions.carried_by(args.model)
    given = {k: getattr(args, k, None) for k in ("beam_size", "alpha")}
    chosen = carried.updated(**given)
    try:
        if given["beam_size"] is None:
            wide = chosen.widened(n_best, constrained=constrained)
            if wide.beam_size != chosen.beam_size:
                why = "--n-best" if n_best == wide.beam_size else "--constraints"
                source += f", the beam raised to {wide.beam_size} for {why}"
            chosen = wide
        else:
            chosen.check_constraints(constrained)
            chosen = chosen.updated(n_best=n_best)
    except ValueError as e:  # the options' own message, in the flags' names
        raise ValueError(as_flags(str(e))) from None
    beam = given["beam_size"]
    if beam is not None and (given["alpha"] is not None or beam == 1):
        return chosen, None
    origin = source if all(v is None for v in given.values()) else "the flags and " + source
    return chosen, f"attnlab {command}: beam {chosen.beam_size}, alpha {chosen.alpha:g}: {origin}"


def as_flags(message: str) -> str:
    """A :class:`~attnlab.decode.options.DecodingOptions` (or engine) error in the flags'
    names."""
    names = (("n_best", "--n-best"), ("beam_size", "--beam-size"), ("sample=True", "--sample"))
    for field, flag in (*names, ("constraints:", "--constraints:"), ("quantize:", "--quantize:")):
        message = message.replace(field, flag)
    return message


def engine_of(args: argparse.Namespace, models: int) -> str:
    """``--engine``, checked against the command's other flags before any model is loaded
    (the engine's refusals, attnlab.inference.engines, in the flags' names)."""
    from ..inference.engines import check_engine

    constrained = bool(getattr(args, "constraints", None))
    quantize = getattr(args, "quantize", None)
    try:
        return check_engine(args.engine, models=models, constraints=constrained, quantize=quantize)
    except ValueError as e:
        raise ValueError("--" + as_flags(str(e))) from None


def add_guide_flags(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` what guides and explains a translation: ``--constraints FILE`` (target
    phrases that must appear), ``--prefix TEXT`` (the start the translation must have) and
    ``--scores`` (each token's log-probability)."""
    parser.add_argument(
        "--constraints",
        default=None,
        metavar="FILE",
        help="target phrases each translation must contain: one line per input line, its "
        "phrases separated by tabs (an empty line: none), at most --beam-size per line; "
        "constrained beam search (Post & Vilar 2018). A line whose phrases cannot be met is "
        "left empty with an error naming it (exit status 2); the others translate",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        metavar="TEXT",
        help="every translation starts with TEXT (target language), and the model continues "
        "it: interactive completion",
    )
    parser.add_argument(
        "--scores",
        action="store_true",
        help="after each translation, tab-separated: log P, the length-normalised score (log "
        "P / length penalty) and each token's log-probability (space-separated, EOS last); "
        "--json gives them with the tokens",
    )


def add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared sampling flags: ``--sample``, ``--temperature``, ``--top-k``
    (sampling only: the k most probable tokens) and ``--top-p``."""
    parser.add_argument(
        "--sample", action="store_true", help="draw each token instead of choosing the best"
    )
    parser.add_argument(
        "--temperature", type=positive_number, default=1.0, help="--sample: temperature (1.0)"
    )
    parser.add_argument(
        "--top-k",
        type=positive_int,
        default=None,
        metavar="K",
        help="--sample: draw from the K most probable tokens only",
    )
    parser.add_argument(
        "--top-p",
        type=probability,
        default=None,
        metavar="P",
        help="--sample: draw from the smallest set of tokens whose mass reaches P, in (0, 1]",
    )


#: ``--errors``: what a command that reads text files does with a line that is not UTF-8.
TEXT_ERRORS_CHOICES = ("strict", "replace")


def add_input_bound_flags(parser: argparse.ArgumentParser, *, too_long: bool = True) -> None:
    """Give ``parser`` the shared ``--errors`` flag (text files: a line that is not UTF-8) and,
    with ``too_long``, ``--too-long`` (a source over the model's max_len tokens)."""
    parser.add_argument(
        "--errors",
        choices=TEXT_ERRORS_CHOICES,
        default="strict",
        help="a line of input text that is not UTF-8: strict (default) stops with an error "
        "naming the file and line (for a file, before any work); replace reads its bad bytes "
        "as U+FFFD",
    )
    if too_long:  # the Translator's too_long: its choices and default, its bound in characters
        from ..inference.bounds import CHARS_PER_TOKEN, TOO_LONG_CHOICES

        parser.add_argument(
            "--too-long",
            choices=TOO_LONG_CHOICES,
            default="cut",
            help=f"a source over the model's max_len tokens (or {CHARS_PER_TOKEN} characters "
            "per token of it): cut (default) translates its first max_len tokens, with a note "
            "naming the line on stderr; refuse leaves its output line empty, with an error "
            "naming the line (the other lines translate; the exit status is then 2)",
        )


def add_mask_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``masks`` and ``viz masks``: ``--lengths``, ``--pad-to`` and
    ``--causal/--no-causal``."""
    parser.add_argument(
        "--lengths",
        type=parse_lengths,
        default=[4, 2],
        metavar="N,N,...",
        help="the sequences' lengths, comma-separated (default: 4,2)",
    )
    parser.add_argument(
        "--pad-to",
        type=positive_int,
        default=None,
        metavar="N",
        help="pad every sequence to N positions (default: the longest length)",
    )
    add_causal_flag(parser)


def check_pad_to(lengths: list[int], pad_to: int | None) -> None:
    """``--pad-to`` shorter than the longest of ``--lengths``: one line naming both."""
    if pad_to is not None and lengths and pad_to < max(lengths):
        raise ValueError(
            f"--pad-to: expected >= the longest of --lengths ({max(lengths)}), got {pad_to}"
        )


# -- a job: `attnlab train` and `attnlab prepare` ----------------------------------------------


def setting(text: str) -> tuple[str, str, object]:
    """``TABLE.KEY=VALUE`` (VALUE read as JSON when it parses, else as a string)."""
    import json

    key, sep, raw = text.partition("=")
    table, dot, name = key.partition(".")
    if not (sep and dot and table and name):
        raise argparse.ArgumentTypeError(
            f"expected TABLE.KEY=VALUE, e.g. model.d_model=128, got {text!r}"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return table, name, value


def add_config_flag(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Give ``parser`` the job's ``--config FILE`` (dest ``config``)."""
    parser.add_argument(
        "--config",
        required=required,
        default=None,
        metavar="FILE",
        help="a TOML job file (start one from `attnlab config --recipe NAME`), or the NAME "
        "of a packaged recipe (a task's name gives its recipe)",
    )


def add_set_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the job's repeatable ``--set TABLE.KEY=VALUE`` (dest ``set``)."""
    parser.add_argument(
        "--set",
        type=setting,
        action="append",
        metavar="TABLE.KEY=VALUE",
        help="any other setting, e.g. model.d_model=128 (repeatable)",
    )


def add_verify_data_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` ``--verify-data`` (dest ``verify_data``)."""
    parser.add_argument(
        "--verify-data",
        action="store_true",
        help="read every training file in full for its digest, even when the shard cache "
        "remembers it unchanged (same path, inode, size and modification time)",
    )
