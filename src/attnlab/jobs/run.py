"""Running a job: :func:`train_job` (corpus, tokenizers, model, training, the test split's
scores) and :func:`evaluate_model` (a saved model on a split of its task)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._io import write_json
from .tables import JOB_FILE, TRANSLATION_VALIDATION, Job

__all__ = ["RESULTS_FILE", "evaluate_model", "train_job"]

RESULTS_FILE = "results.json"


def _tokenizers(job: Job, corpus, directory: Path, reuse: bool, rank: int):
    """Train (or, resuming, reload) the tokenizers on the training split only. In a
    distributed run rank 0 trains and saves them; the other ranks wait, then load them."""
    import torch.distributed as dist

    from ..data.tokenizer import Tokenizer, load_tokenizers, save_tokenizers

    distributed = dist.is_available() and dist.is_initialized()
    if rank != 0:
        dist.barrier()  # rank 0 has written them
        return load_tokenizers(directory)
    if reuse and directory.is_dir():
        if distributed:
            dist.barrier()
        return load_tokenizers(directory)
    if job.init_from is not None:  # fine-tuning keeps the starting model's tokenizers
        from ..modeldir import resolve_model_dir

        start = resolve_model_dir(job.init_from, name="[model] init_from")
        src, tgt = load_tokenizers(start)
        save_tokenizers(directory, src, None if tgt is src else tgt)
        if distributed:
            dist.barrier()
        return src, tgt
    train = corpus["train"]
    options = job.tokenizer
    kwargs = {"min_frequency": options.min_frequency}
    if job.task.is_lm:  # one vocabulary for the one stream of text
        src = tgt = Tokenizer.train(train, options.vocab_size, **kwargs)
        save_tokenizers(directory, src, None)
    elif options.joint:
        texts = [s for pair in train for s in pair]
        src = tgt = Tokenizer.train(texts, options.vocab_size, **kwargs)
        save_tokenizers(directory, src, None)
    else:
        src = Tokenizer.train([s for s, _ in train], options.vocab_size, **kwargs)
        tgt = Tokenizer.train([t for _, t in train], options.vocab_size, **kwargs)
        save_tokenizers(directory, src, tgt)
    if distributed:
        dist.barrier()
    return src, tgt


def train_job(
    job: Job,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run ``job`` into directory ``out``; return the summary (also in ``out/results.json``).

    ``log`` receives one line per stage (the CLI prints them); without ``progress`` it also
    receives training's plain progress lines (:class:`~attnlab.train.Trainer`'s ``log``). Rank
    0 appends all of them, and the scores, to ``out/train.log``. With ``resume`` the
    tokenizers are reloaded and training continues from the newest checkpoint. Under
    ``torchrun`` (after :func:`attnlab.train.init_distributed`) every rank trains its share of
    each batch with DistributedDataParallel; only rank 0 writes files, logs and scores the
    test split (the others return ``{}``).
    """
    from ..data.batching import TokenBatcher
    from ..train import TrainConfig, Trainer, world
    from ..train.progress import append_train_log

    started = time.perf_counter()
    job.check()  # before any work: reading the corpus, training tokenizers, creating `out`
    out = Path(out)
    train_config = TrainConfig(out=str(out), **job.train)
    rank, _ = world()
    if rank != 0:
        log = lambda message: None  # noqa: E731 - one voice in a distributed run
    out.mkdir(parents=True, exist_ok=True)

    def note(line: str) -> None:  # shown, and kept in train.log
        log(line)
        if rank == 0:
            append_train_log(out, line)

    corpus = job.task.load()
    splits = corpus if job.task.is_lm or job.task.is_image else corpus.splits
    what = (
        job.task.name
        if job.task.is_lm or job.task.is_image
        else f"{corpus.name} {corpus.src_lang}->{corpus.tgt_lang}"
    )
    note(f"task {what}: " + ", ".join(f"{k} {len(v):,}" for k, v in splits.items()))
    padding: float | None = None
    tokenizer_dir: Path | None = None
    start_scores: dict[str, float] | None = None
    if job.task.is_image:
        model = _build_model(job)
        train_examples, valid_examples, on_evaluate = corpus["train"], corpus["valid"], None
        note(
            f"model: VisionTransformer, {job.model.get('preset')} preset, "
            f"{model.num_parameters():,} parameters, {model.config.num_patches} patches of "
            f"{model.config.patch_size}x{model.config.patch_size} pixels; "
            f"{len(train_examples):,} training images"
        )
    else:
        tokenizer_dir = out / "tokenizers"
        src_tok, tgt_tok = _tokenizers(job, corpus, tokenizer_dir, reuse=resume, rank=rank)
        joint = " (joint)" if job.tokenizer.joint else ""
        note(f"tokenizers: {src_tok.vocab_size:,} subwords{joint}")
        setup = _lm_setup if job.task.is_lm else _translation_setup
        model, train_examples, valid_examples, on_evaluate = setup(job, corpus, src_tok, tgt_tok)
        if job.init_from is not None and rank == 0 and not resume:
            start_scores = _validation_scores(
                model,
                src_tok,
                tgt_tok,
                corpus["valid"],
                beam_size=job.eval.beam_size,
                alpha=job.eval.alpha,
            )
            note(f"starting model ({job.init_from}): {_scores_text('valid', start_scores)}")
        padding = TokenBatcher.for_examples(
            train_examples, train_config.max_tokens, seed=train_config.seed
        ).padding_fraction(0)
        note(
            f"model: {job.model.get('preset', 'small')} preset, {model.num_parameters():,} "
            f"parameters; {len(train_examples):,} training examples ({train_examples.dropped:,} "
            f"longer than {job.task.max_len} tokens left out), padding {padding:.1%} of the "
            f"batches"
        )
    if rank == 0:
        write_json(out / JOB_FILE, job.to_dict())
    trainer = Trainer(
        model,
        train_examples,
        valid_examples,
        train_config,
        tokenizers_dir=tokenizer_dir,
        on_evaluate=on_evaluate,
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
    tuned: dict[str, Any] | None = None
    if job.init_from is not None:
        tuned = evaluate_model(model_dir, split="valid", corpus=corpus, job=job)
        note(f"fine-tuned model: {_scores_text('valid', tuned)}")
    split = "valid" if job.task.is_lm else "test"
    result = evaluate_model(model_dir, split=split, corpus=corpus)
    result.update(
        {
            "training": summary,
            "model_dir": str(model_dir),
            "wall_time_s": time.perf_counter() - started,
        }
    )
    if padding is not None:
        result["padding_fraction"] = padding
    if job.init_from is not None:
        result["init_from"] = job.init_from
        if start_scores is not None:
            result["valid_before"] = start_scores
        if tuned is not None:
            result["valid_after"] = {k: tuned[k] for k in ("bleu", "chrf", "exact_match")}
    append_train_log(out, _score_line(result))
    write_json(out / RESULTS_FILE, result)
    return result


def _scores_text(split: str, scores: dict[str, Any]) -> str:
    return (
        f"{split} BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, exact match "
        f"{scores['exact_match']:.1%}"
    )


def _score_line(result: dict[str, Any]) -> str:
    """The split's headline scores, for train.log."""
    if "accuracy" in result:
        return f"{result['split']}: accuracy {result['accuracy']:.2%}"
    if "perplexity" in result:
        return f"{result['split']}: perplexity {result['perplexity']:.2f}"
    return (
        f"{result['split']}: BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}, exact match "
        f"{result['exact_match']:.1%}"
    )


def _seeded(job: Job, build: Callable[[], Any]) -> Any:
    """``build()`` under ``[train] seed`` (the global generator left as it was), so that a
    job's initial weights, hence its result, are the same on every run."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(job.train.get("seed", 0)))
        return build()


def _build_model(job: Job):
    """A fresh model for an image task, seeded by ``[train] seed``."""
    from ..vision import VisionTransformer

    return _seeded(job, lambda: VisionTransformer(job.model_config()))


def _translation_setup(job: Job, corpus, src_tok, tgt_tok):
    """The encoder-decoder model, framed examples, and the validation BLEU hook."""
    from ..data.batching import make_examples
    from ..model import Transformer

    if job.init_from is not None:
        model = _starting_model(job, src_tok, tgt_tok)
    else:
        model = _seeded(
            job, lambda: Transformer(job.model_config(src_tok.vocab_size, tgt_tok.vocab_size))
        )
    c = model.config

    def encode(split: str):
        """Framed as the model's decoder starts and ends (Marian: from pad, EOS 0)."""
        pairs = corpus[split]
        src = src_tok.encode_batch([s for s, _ in pairs])
        tgt = tgt_tok.encode_batch([t for _, t in pairs])
        framing = {"bos_id": c.bos_id, "eos_id": c.eos_id}
        return make_examples(list(zip(src, tgt, strict=True)), max_len=job.task.max_len, **framing)

    valid_pairs = corpus["valid"][: job.eval.bleu_sentences]

    def on_evaluate(step: int, trained) -> dict[str, float]:
        """BLEU and exact match of greedy translations of the first validation pairs."""
        if not valid_pairs:
            return {}
        scores = _validation_scores(trained, src_tok, tgt_tok, valid_pairs, beam_size=1)
        found = (scores["bleu"], scores["exact_match"], scores["chrf"])
        return dict(zip(TRANSLATION_VALIDATION, found, strict=True))

    return model, encode("train"), encode("valid"), on_evaluate


def _starting_model(job: Job, src_tok, tgt_tok):
    """The model a fine-tuning run starts from: ``[model] init_from``'s weights in a model of
    its config with the job's dropout rates, checked against the tokenizers it came with."""
    from ..evaluate import load_with_tokenizers
    from ..model import Transformer
    from ..modeldir import resolve_model_dir

    start = resolve_model_dir(job.init_from, name="[model] init_from")
    try:
        loaded, _, _ = load_with_tokenizers(start, device="cpu")
    except (OSError, ValueError) as e:
        raise ValueError(f"[model] init_from: {e}") from None
    for side, tokenizer, size in (
        ("source", src_tok, loaded.config.vocab_size),
        ("target", tgt_tok, loaded.config.target_vocab_size),
    ):
        if tokenizer.vocab_size != size:
            raise ValueError(
                f"[model] init_from: {start}: the {side} tokenizer has {tokenizer.vocab_size:,} "
                f"tokens, the model's {side} vocabulary {size:,}"
            )
    model = Transformer(job.model_config())
    model.load_state_dict(loaded.state_dict())
    return model


def _validation_scores(
    model, src_tok, tgt_tok, pairs, *, beam_size: int, alpha: float = 0.6
) -> dict[str, float]:
    """BLEU, chrF and exact match of ``model``'s translations of the validation ``pairs``
    (decoding leaves the model in the mode it found it in): the hook's greedy scores during
    training, and a fine-tuning run's before and after with the final test's decoding."""
    from ..evaluate import Translator, score

    translator = Translator(model, src_tok, tgt_tok, beam_size=beam_size, alpha=alpha)
    hyps = translator.translate([s for s, _ in pairs])
    scores = score(hyps, [t for _, t in pairs])
    return {"bleu": scores.bleu, "chrf": scores.chrf, "exact_match": scores.exact_match}


def _lm_setup(job: Job, corpus, tokenizer, _):
    """The decoder-only model and its framed lines (validation: loss, hence perplexity)."""
    from ..data.batching import make_lm_examples
    from ..model import TransformerLM

    def encode(split: str):
        return make_lm_examples(tokenizer.encode_batch(corpus[split]), max_len=job.task.max_len)

    model = _seeded(
        job, lambda: TransformerLM(job.model_config(tokenizer.vocab_size, tokenizer.vocab_size))
    )
    return model, encode("train"), encode("valid"), None


def _evaluate_lm(
    model_dir: Path, corpus: dict, split: str, limit: int | None, device: str | None
) -> dict:
    from ..evaluate import lm_perplexity, load_with_tokenizers

    if split not in corpus:
        raise ValueError(f"split: a text task has {sorted(corpus)}, not {split!r}")
    lines = corpus[split][:limit] if limit else corpus[split]
    model, tokenizer, _ = load_with_tokenizers(model_dir, device=device)
    result = lm_perplexity(model, tokenizer, lines)
    result.update({"split": split, "task": "text"})
    return result


def _evaluate_images(
    model_dir: Path,
    corpus: dict,
    split: str,
    limit: int | None,
    examples: int,
    device: str | None,
) -> dict:
    import torch

    from ..evaluate import classify
    from ..model import load_pretrained

    if split not in corpus:
        raise ValueError(f"split: the digits task has {sorted(corpus)}, not {split!r}")
    data = corpus[split]
    images, labels = data.images[:limit], data.labels[:limit]
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_pretrained(model_dir, device=device)
    result = classify(model, images, labels, classes=data.classes)
    result.update({"split": split, "task": "digits"})
    result["examples"] = result.pop("errors")[:examples]
    return result


def evaluate_model(
    model_dir: str | os.PathLike,
    *,
    split: str | None = None,
    corpus=None,
    job: Job | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    limit: int | None = None,
    examples: int = 10,
    device: str | None = None,
) -> dict[str, Any]:
    """Translate ``split`` (default ``test``) of the model's task (from its ``job.json``) with
    beam search (``beam_size`` and length penalty ``alpha``, by default the job's ``[eval]``
    ones) and score it, on ``device`` (``cpu`` or ``cuda``; default CUDA when available,
    CPU for a language model). Returns ``{"bleu", "chrf", "exact_match", "sentences",
    signatures, "split", "examples": a few (source, reference, hypothesis)}``. For a language
    model (the ``text`` task): its perplexity on ``split`` (default ``valid``)."""
    from ..evaluate import Translator, score

    model_dir = Path(model_dir)
    if job is None:
        path = model_dir / JOB_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: missing; the model was not saved by `attnlab train`, so its task is "
                f"unknown"
            )
        try:
            job = Job.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None
    if corpus is None:
        corpus = job.task.load()
    if split is None:
        split = "valid" if job.task.is_lm else "test"
    if job.task.is_lm or job.task.is_image:
        for name, value in (("beam_size", beam_size), ("alpha", alpha)):
            if value is not None:
                raise ValueError(
                    f"{name}: the {job.task.name} task's model is scored without beam search "
                    f"({'perplexity' if job.task.is_lm else 'accuracy'}); pass None"
                )
    if job.task.is_lm:
        return _evaluate_lm(model_dir, corpus, split, limit, device)
    if job.task.is_image:
        return _evaluate_images(model_dir, corpus, split, limit, examples, device)
    pairs = corpus[split]
    if limit is not None:
        pairs = pairs[:limit]
    beam_size = beam_size or job.eval.beam_size
    alpha = job.eval.alpha if alpha is None else alpha
    translator = Translator.load(
        model_dir,
        beam_size=beam_size,
        alpha=alpha,
        max_tokens=job.eval.max_tokens,
        device=device,
    )
    hyps = translator.translate([s for s, _ in pairs])
    # The literature's BLEU beside the headline (results.json, `evaluate --tokenized-bleu`).
    scores = score(hyps, [t for _, t in pairs], tokenized_lang=job.task.tgt_lang)
    result = scores.to_dict()
    result["split"] = split
    result["task"] = job.task.name
    result["beam_size"] = beam_size
    result["alpha"] = alpha
    result["examples"] = [
        {"source": s, "reference": t, "hypothesis": h}
        for (s, t), h in list(zip(pairs, hyps, strict=True))[:examples]
    ]
    return result
