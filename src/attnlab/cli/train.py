"""``attnlab train``: a job from the task's recipe, --config, the flags and --set
(:func:`build_job`, through :func:`attnlab.jobs.compose_job`), its run directory prepared and
checked before the first step, and what the run printed at its end."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from pathlib import Path

from ..jobs import TASKS
from ..models.transformer import TransformerConfig
from ..models.vision import VisionConfig
from ..train.progress import TRAIN_LOG
from ._args import (
    add_compile_flag,
    add_config_flag,
    add_device_flag,
    add_out_flag,
    add_overwrite_flag,
    add_set_flag,
    add_verify_data_flag,
    device_of,
    positive_int,
)
from .evaluate import print_scores


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with each line of a description or epilog filled on its own (the
    recipes' summary stays one task a line)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            more = indent + " " * (len(line) - len(line.lstrip()) + 4)
            filled = textwrap.fill(
                line,
                width,
                initial_indent=indent,
                subsequent_indent=more,
                break_on_hyphens=False,  # keeps --max-minutes whole
                break_long_words=False,
            )
            lines.append(filled)
        return "\n".join(lines)


#: The settings of a task's recipe that `train --help` shows, by table.
_SHOWN = {
    "train": (
        "schedule", "lr", "warmup", "max_steps", "max_epochs", "max_minutes", "max_tokens",
        "batch_size",
    ),
    "eval": ("beam_size", "alpha"),
}  # fmt: skip


def _recipes_epilog() -> str:
    """What ``attnlab train --task TASK`` runs, one task a line, read from the recipes (and,
    for a task without one, from the defaults of the job's tables)."""
    import dataclasses

    from ..jobs import EvalOptions, recipe
    from ..train.config import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    defaults.update(EvalOptions().to_dict())
    lines = [
        "What each task runs unless told otherwise (its recipe; `attnlab config --recipe "
        "TASK` prints it in full, to start a job file from):"
    ]
    bare = []
    for name, task in TASKS.items():
        if task.recipe is None:
            bare.append(name)
            continue
        tables = recipe(name)
        model = dict(tables.get("model", {}))
        preset = model.pop("preset", "small")
        sizes = f" with {', '.join(f'{k} {v}' for k, v in model.items())}" if model else ""
        shown = [
            f"{key} {tables[table][key]}"
            for table, keys in _SHOWN.items()
            for key in keys
            if key in tables.get(table, {})
        ]
        lines.append(f"  {name}: the {preset} preset{sizes}; {', '.join(shown)}")
    if bare:
        shown = [
            f"{key} {defaults[key]}"
            for keys in _SHOWN.values()
            for key in keys
            if defaults.get(key) is not None
        ]
        lines.append(
            f"  {', '.join(bare)}: no recipe: the small preset; {', '.join(shown)} (schedule "
            f"transformer: the paper's eq. 3, Adam); no limit: set --max-steps, --max-epochs "
            f"or --max-minutes"
        )
    return "\n".join(lines)


def build_job(args: argparse.Namespace, notes: list[str] | None = None):
    """The job the command line asks for (:func:`attnlab.jobs.compose_job`): the task's recipe,
    then --config, the flags and --set. ``--preset`` chooses the whole model, so the recipe's
    or the job file's other ``[model]`` settings are dropped; each is named in ``notes`` (when
    given)."""
    from ..jobs import compose_job

    init_from = getattr(args, "init_from", None)
    if args.preset is not None and init_from is not None:
        raise ValueError(
            f"--preset {args.preset}: a fine-tuning run (--init-from) keeps the architecture of "
            f"the model it starts from; leave --preset out"
        )
    if args.vocab_size is not None and init_from is not None:
        raise ValueError(
            "--vocab-size: a fine-tuning run (--init-from) keeps the tokenizers of the model it "
            "starts from (no new vocabulary); leave --vocab-size out"
        )
    flags = {
        ("model", "init_from"): init_from,
        ("model", "preset"): args.preset,
        ("task", "data_dir"): args.data_dir,
        ("task", "src_lang"): args.src_lang,
        ("task", "tgt_lang"): args.tgt_lang,
        ("task", "text_file"): args.text_file,
        ("tokenizer", "vocab_size"): args.vocab_size,
        ("train", "max_steps"): args.max_steps,
        ("train", "max_epochs"): args.max_epochs,
        ("train", "max_minutes"): args.max_minutes,
        ("train", "max_tokens"): args.max_tokens,
        ("train", "warmup"): args.warmup,
        ("train", "eval_every"): args.eval_every,
        ("train", "checkpoint_every"): args.checkpoint_every,
        ("train", "device"): args.device,
        ("train", "seed"): args.seed,
        ("train", "keep_best"): args.keep_best,
        ("eval", "beam_size"): args.beam_size,
        ("train", "bf16"): True if args.bf16 else None,
        ("train", "compile"): args.compile,
    }
    try:
        note = None if notes is None else notes.append
        return compose_job(args.config, task=args.task, flags=flags, sets=args.set or (), note=note)
    except FileNotFoundError as e:  # --config names neither a file nor a recipe
        raise FileNotFoundError(f"--config {e}") from None
    except ValueError as e:  # a task flag the task has no option for: name the flag
        for key, flag in _TASK_FLAGS.items():
            prefix = f"[task] {key}: "
            if str(e).startswith(prefix) and str(e).endswith("has no such option"):
                raise ValueError(f"{flag}: {str(e)[len(prefix) :]} ([task] {key})") from None
        raise


def cmd_train(args: argparse.Namespace) -> int:
    from ..jobs import train_job
    from ..train import destroy_distributed, init_distributed
    from ..train.distributed import launched_world

    notes: list[str] = []
    job = build_job(args, notes)
    if args.device is not None:
        device_of(args.device)  # --device cuda without CUDA: one line naming the flag
    out = Path(args.out or f"runs/{job.task.name}")
    if args.resume and args.overwrite:
        raise ValueError("--resume, --overwrite: choose one (continue the run, or start it over)")
    context = _check_startable(job, out)  # before --out is touched: a refused start leaves none
    rank, world = launched_world()  # under torchrun: this process's rank; else (0, 1)
    if rank == 0:
        _prepare_out(out, resume=args.resume, overwrite=args.overwrite)
        for note in notes:
            print(f"attnlab train: note: {note}", flush=True)
        where = f"{job.task.heading()} into {out}/"
        ranks = f" on {world} processes" if world > 1 else ""
        print(f"attnlab train: {where}{ranks}", flush=True)
    if world > 1 or args.verify_data:
        # Under torchrun, the data made ready before the process group exists: no collective
        # (and no timeout) waits on a preparation, however long; the other ranks wait on the
        # cache, and say so. (One process prepares in train_job, which logs it.)
        voice = "  " if rank == 0 else f"  rank {rank}: "
        job.task.prepare(
            context,
            note=lambda line: print(f"{voice}{line}", flush=True),
            rank=rank,
            resume=args.resume,
            verify=args.verify_data,
        )
    rank, world = init_distributed()  # under torchrun: join the group; else (0, 1)
    try:
        created = not out.exists()
        try:
            result = train_job(
                job,
                out,
                context=context,
                resume=args.resume,
                progress=not args.no_progress and rank == 0,
                log=lambda line: print(f"  {line}", flush=True),
            )
        except BaseException:
            if rank == 0 and created:
                _remove_failed_start(out)
            raise
    finally:
        destroy_distributed()
    if rank != 0:
        return 0
    _print_time_cap(result.get("training", {}), job.train)
    print_scores(result, job.task, beam_size=job.eval.decoding.beam_size)
    use = job.task.command
    print(f"model: {result['model_dir']}  (attnlab {use} --model {result['model_dir']} ...)")
    best = result.get("training", {}).get("best")
    if best:
        print(
            f"best: {best['model_dir']}  ({best['column']} {best['value']:.4g} at step "
            f"{best['step']}; attnlab evaluate --model {best['model_dir']} ...)"
        )
    print(
        f"results: {out / 'results.json'}; metrics: {out / 'metrics.csv'}; log: {out / TRAIN_LOG}"
    )
    return 0


def _check_startable(job, out: Path | str = "."):
    """What would stop the run before its first step, said in the command's flags: no limit
    on training; then every setting and what the task's options name (`Job.check`, whose
    context of the run into ``out`` is returned)."""
    train = job.train
    if all(train.get(name) is None for name in ("max_steps", "max_epochs", "max_minutes")):
        raise ValueError(
            f"--max-steps, --max-epochs, --max-minutes: nothing limits training; the "
            f"{job.task.name!r} task has no recipe that sets one: set at least one (or "
            f"[train] max_steps, max_epochs or max_minutes in --config)"
        )
    try:
        return job.check(out)
    except (ValueError, OSError) as e:  # a [task] option a flag sets: name the flag
        message = str(e)
        for key, flag in _TASK_FLAGS.items():
            if message.startswith(f"[task] {key}:"):
                raise type(e)(flag + message[len(f"[task] {key}") :]) from None
        raise


#: The [task] options that `attnlab train` flags set.
_TASK_FLAGS = {
    "data_dir": "--data-dir",
    "src_lang": "--src-lang",
    "tgt_lang": "--tgt-lang",
    "text_file": "--text-file",
}


def _remove_failed_start(out: Path) -> None:
    """Remove the run directory this command created when training failed before its first
    checkpoint: a failed start leaves nothing behind (a run with checkpoints stays, to
    --resume)."""
    from ..train import find_checkpoints

    if out.is_dir() and not find_checkpoints(out):
        shutil.rmtree(out, ignore_errors=True)


#: What `attnlab train` writes into its --out directory: --overwrite removes a directory only
#: when it holds one of these sets, the mark of an earlier run (the job and the log are written
#: at the start: a run killed before its first checkpoint holds those two).
_RUN_MARKS = (("checkpoints",), ("results.json",), ("job.json", "train.log"))


def _prepare_out(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse, in terms of the command's flags, an --out that already holds a trained run
    (unless --resume or --overwrite); with --overwrite remove that run."""
    from ..train import find_checkpoints

    if resume or not out.exists():
        return
    if not out.is_dir():
        raise NotADirectoryError(f"--out: {out} exists and is not a directory")
    marks = [names for names in _RUN_MARKS if all((out / name).exists() for name in names)]
    if overwrite:
        if not marks:
            if any(out.iterdir()):
                raise FileExistsError(
                    f"--overwrite: {out} does not look like an attnlab run (no "
                    f"{' or '.join(' and '.join(names) for names in _RUN_MARKS)}); not removing "
                    f"it: choose another --out"
                )
            return
        if Path.cwd().resolve().is_relative_to(out.resolve()):
            raise ValueError(f"--overwrite: {out} holds the current directory; not removing it")
        shutil.rmtree(out)
        print(f"attnlab train: --overwrite: removed the earlier run in {out}/", flush=True)
        return
    checkpoints = find_checkpoints(out)
    if checkpoints:
        raise FileExistsError(
            f"--out: {out} already holds a run (checkpoint {checkpoints[-1].name}); pass "
            f"--resume to continue it, --overwrite to start it over, or choose another --out"
        )


def _print_time_cap(training: dict, train_options: dict) -> None:
    """Say so when the wall-clock safety cap, not the step or epoch budget, ended training:
    the result then depends on the machine's speed."""
    if training.get("stop_reason") != "max_minutes":
        return
    budget = [
        f"{name} = {train_options[name]}"
        for name in ("max_steps", "max_epochs")
        if train_options.get(name) is not None
    ]
    planned = f", before its {' / '.join(budget)}" if budget else ""
    cap, steps = train_options.get("max_minutes"), training.get("steps")
    print(
        f"note: training stopped at the time cap (--max-minutes {cap}) after {steps} steps"
        f"{planned}; on a faster or less busy machine the same command trains further, so "
        f"this result is not reproducible",
        flush=True,
    )


def add_parsers(sub) -> None:
    recipe_default = "default: the task's recipe"
    train = sub.add_parser(
        "train",
        help="train a translation model end to end: corpus, tokenizers, model, checkpoints",
        description=(
            "Train an encoder-decoder Transformer from scratch: load the task's corpus, train "
            "BPE tokenizers (over characters, with byte fallback) on its training split, train "
            "with the task's recipe (below), checkpoint atomically, average the last "
            "checkpoints into OUT/model, and score the test split with beam search (sacreBLEU, "
            "chrF, exact match) into OUT/results.json. Settings come from the task's recipe, "
            "then --config (a TOML job file: [task] [tokenizer] [model] [train] [eval], or a "
            "packaged recipe's name), then the flags, then --set: a later one wins. "
            "--preset chooses the whole model: the recipe's [model] sizes are dropped "
            "(--set model.KEY=VALUE changes one). Under torchrun it trains with "
            "DistributedDataParallel. The text task trains a decoder-only language model "
            "instead, scored by perplexity; the digits task a Vision Transformer on "
            "scikit-learn's 8x8 digits, scored by accuracy."
        ),
        epilog=_recipes_epilog(),
        formatter_class=_Formatter,
    )
    add_config_flag(train)
    train.add_argument(
        "--task",
        choices=tuple(TASKS),  # the task registry
        default=None,
        help="numbers (offline default), multi30k, files ([task] paths), text (a language "
        "model on --text-file), or digits (a Vision Transformer on scikit-learn's 8x8 digits)",
    )
    train.add_argument(
        "--init-from",
        default=None,
        metavar="DIR",
        help="fine-tune: start from this translation model's weights and keep its tokenizers "
        "(a model attnlab trained or imported); the fine-tuning recipe fills in [train] "
        "(`attnlab config --recipe finetune`)",
    )
    train.add_argument("--text-file", default=None, help="plain text for the 'text' task")
    add_out_flag(train, "the run directory (default: runs/TASK)")
    train.add_argument("--data-dir", default=None, help="Multi30K directory ($ATTNLAB_MULTI30K)")
    train.add_argument("--src-lang", default=None, help="source language (en)")
    train.add_argument("--tgt-lang", default=None, help="target language (de)")
    train.add_argument(
        "--preset",
        default=None,
        choices=TransformerConfig.preset_names() + VisionConfig.preset_names(),
        help="the model: a preset, all of it (the recipe's [model] sizes are dropped); "
        "default: the task's recipe",
    )
    for flag, kind, what in (
        ("--vocab-size", positive_int, "BPE size"),
        ("--max-steps", positive_int, "optimizer steps"),
        ("--max-epochs", positive_int, "epochs"),
        ("--max-minutes", float, "a wall-clock cap in minutes"),
        ("--max-tokens", positive_int, "tokens per batch and side"),
        ("--warmup", positive_int, "warm-up steps"),
        ("--eval-every", positive_int, "validation every N steps"),
        ("--checkpoint-every", positive_int, "checkpoint every N steps"),
    ):  # the recipe's values unless given
        train.add_argument(flag, type=kind, default=None, help=f"{what} ({recipe_default})")
    add_device_flag(train)  # None: the job's [train] device (auto unless it says otherwise)
    train.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    add_compile_flag(train)
    train.add_argument(
        "--seed", type=int, default=None, metavar="N", help="random seed (default: [train] seed, 0)"
    )
    train.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        help=f"beam for the final test ({recipe_default})",
    )
    train.add_argument(
        "--keep-best",
        default=None,
        metavar="COLUMN",
        help="also keep the best model so far as OUT/best by this validation column: val_loss "
        "(lower is better), val_bleu, val_exact, val_chrf or val_accuracy (higher is better)",
    )
    add_set_flag(train)
    add_verify_data_flag(train)
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    add_overwrite_flag(
        train,
        "start over: remove --out first when it holds an earlier run (checkpoints/ or "
        "results.json)",
    )
    train.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: the plain progress lines (every train.log_every steps) go to "
        "standard output instead (they are in OUT/train.log either way)",
    )
    train.set_defaults(func=cmd_train)
