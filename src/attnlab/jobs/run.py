"""Running a job: :func:`train_job` (data, tokenizers, model, training, the final scores) and
:func:`evaluate_model` (a saved model on a split of its task). What differs between tasks is
the task object's (:mod:`attnlab.tasks`); this module asks it, and never which task it is."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._io import write_json
from .._lazy import importing_meanwhile
from ..decode.options import DecodingOptions
from ..tasks import TaskContext
from .job import JOB_FILE, Job

__all__ = ["RESULTS_FILE", "evaluate_model", "read_job", "train_job"]

RESULTS_FILE = "results.json"
# The order of what a task adds to the result (others follow).
_EXTRAS = ("padding_fraction", "init_from", "valid_before", "valid_after")


def train_job(
    job: Job,
    out: str | os.PathLike,
    *,
    context: TaskContext | None = None,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run ``job`` into directory ``out``; return the summary (also in ``out/results.json``).
    ``context``: what :meth:`Job.check` returned for this ``out`` when the caller checked the
    job already (``attnlab train`` does, before it touches ``out``); else it is checked here.

    ``log`` receives one line per stage (the CLI prints them); without ``progress`` it also
    receives training's plain progress lines (:class:`~attnlab.train.Trainer`'s ``log``). Rank
    0 appends all of them, and the scores, to ``out/train.log``. With ``resume`` the
    tokenizers are reloaded and training continues from the newest checkpoint. Under
    ``torchrun`` (after :func:`attnlab.train.init_distributed`) every rank trains its share of
    each batch with DistributedDataParallel; only rank 0 writes files, logs and scores the
    final split (the others return ``{}``). A task with no split to score at the end (a
    ``files`` job without ``test_src``) says so, and its result holds no scores.
    """
    from ..train import Trainer, world
    from ..train.progress import append_train_log

    started = time.perf_counter()
    if context is None:  # before any work: reading the data, training tokenizers, making `out`
        context = job.check(out)
    out, train_config = Path(out), context.train
    if train_config is None:
        raise ValueError("context: not a training run's; Job.check(out) makes one")
    rank, _ = world()
    if rank != 0:
        log = lambda message: None  # noqa: E731 - one voice in a distributed run
    out.mkdir(parents=True, exist_ok=True)
    if rank == 0:  # first: a run killed before training (its teachers decoding) is a run
        write_json(out / JOB_FILE, job.to_dict())

    def note(line: str) -> None:  # shown, and kept in train.log
        log(line)
        if rank == 0:
            append_train_log(out, line)

    task = job.task
    with importing_meanwhile("torch._dynamo"):  # what the optimizer imports: 1 s of the start
        data = task.load()
        note(task.describe(data))
        setup = task.setup(context, data, resume=resume, rank=rank, note=note)
    trainer = Trainer(
        setup.model,
        setup.train,
        setup.valid,
        train_config,
        objective=task.objective(),
        batcher=setup.batcher,
        tokenizers_dir=setup.tokenizers_dir,
        on_evaluate=setup.on_evaluate,
        progress=progress,
        log=None if progress else log,
    )
    summary = trainer.train(resume=resume)
    if rank != 0:
        return {}
    model_dir = out / "model"
    write_json(model_dir / JOB_FILE, job.to_dict())
    if summary.get("best"):  # train.keep_best's model directory, whole like out/model
        write_json(Path(summary["best"]["model_dir"]) / JOB_FILE, job.to_dict())
    note(f"trained: {model_dir}")
    task.after_training(context, model_dir, data, setup, note)
    split = task.final_split(data)
    if split is None:
        result: dict[str, Any] = {"split": None, "task": task.name}
        line = "no test split in the job: nothing scored on test"
        note(line)
    else:
        result = task.evaluate(model_dir, data, context, split=split)
        line = task.score_line(result)
    result.update(
        {
            "training": summary,
            "model_dir": str(model_dir),
            "wall_time_s": time.perf_counter() - started,
        }
    )
    extras = setup.extras
    result.update({k: extras[k] for k in _EXTRAS if k in extras})
    result.update({k: v for k, v in extras.items() if k not in _EXTRAS})
    if split is not None:
        append_train_log(out, line)
    write_json(out / RESULTS_FILE, result)
    return result


def read_job(model_dir: str | os.PathLike) -> Job:
    """The job a model directory was trained by (its ``job.json``); errors name the file."""
    from .._rundir import read_job_file

    data = read_job_file(model_dir)
    try:
        return Job.from_dict(data, saved=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{Path(model_dir) / JOB_FILE}: {e}") from None


def evaluate_model(
    model_dir: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    split: str | None = None,
    corpus=None,
    job: Job | None = None,
    decoding: DecodingOptions | None = None,
    engine: str = "torch",
    limit: int | None = None,
    examples: int = 10,
    device: str | None = None,
) -> dict[str, Any]:
    """Score the model of ``model_dir`` (or the ensemble of a list of model directories, whose
    first one's job is read) on ``split`` of its task (from its ``job.json``; by
    default the split ``attnlab train`` scores at the end: ``test``, ``valid`` for a language
    model), on ``device`` (``cpu`` or ``cuda``; default CUDA when available, CPU for a
    language model). A translation model: decoded with ``decoding`` (None: the job's
    ``[eval]``) on ``engine``, ``{"bleu", "chrf", "exact_match",
    "sentences", signatures, "split", "examples": a few (source, reference, hypothesis)}``. A
    language model (the ``text`` task): its perplexity; an image classifier: its accuracy
    (these take no ``decoding``)."""
    several = not isinstance(model_dir, (str, os.PathLike))
    dirs = [Path(d) for d in model_dir] if several else [Path(model_dir)]  # type: ignore[union-attr]
    if not dirs:
        raise ValueError("model_dir: expected a model directory or a non-empty list of them")
    model_dir = dirs[0]
    if job is None:
        job = read_job(model_dir)
    task = job.task
    if len(dirs) > 1 and not task.decodes:
        raise ValueError(
            f"model_dir: {len(dirs)} models; an ensemble decodes, and the {task.name} task "
            f"scores one model"
        )
    if corpus is None:
        corpus = task.load()
    if split is None:
        split = task.final_split(corpus) or "test"
    return task.evaluate(
        dirs if len(dirs) > 1 else model_dir,
        corpus,
        job.context(),
        split=split,
        limit=limit,
        examples=examples,
        device=device,
        decoding=decoding,
        engine=engine,
    )
