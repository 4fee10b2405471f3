"""What the translation tasks share (numbers, multi30k, files): an encoder-decoder
:class:`attnlab.Transformer` trained on sentence pairs, BPE tokenizers trained on the training
split, greedy BLEU / chrF / exact match on the first validation pairs during training, and
beam search on the test split at the end. Fine-tuning (``[model] init_from``) starts from a
trained model and keeps its tokenizers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..decode.options import DecodingOptions
from .base import Setup, Task, note_token_examples, seeded, shared_tokenizers
from .context import TaskContext

__all__ = [
    "FINE_TUNABLE",
    "TRANSLATION_VALIDATION",
    "DiskPlan",
    "TrainCorpus",
    "TranslationTask",
    "starting_config",
    "validation_scores",
]

#: What a fine-tuning run may change in its starting model's config (not its architecture).
FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")

# What a translation job's validation hook adds to each evaluation during training: BLEU,
# exact match and chrF of greedy translations of the first validation pairs (chrF also ranks
# one-word outputs, such as the numbers task's, where BLEU is 0).
TRANSLATION_VALIDATION = ("val_bleu", "val_exact", "val_chrf")


@dataclass(frozen=True)
class TrainCorpus:
    """A training corpus on disk: its ``name``, line-aligned files, its ``weight`` in a
    mixture, and the ``option`` that named it (for messages)."""

    name: str
    src: str
    tgt: str
    weight: float = 1.0
    option: str = "[task] train_src, train_tgt"


@dataclass(frozen=True)
class DiskPlan:
    """A training split on disk (the files task's; an in-memory task has none): its
    ``corpora``, trained on from token shards, their ``cleaning``
    (:class:`~attnlab.data.clean.CleaningOptions`), how several mix (``mixing``: ``weights``
    or ``temperature``; empty: each once), where they are prepared (``cache_dir``; None: the
    default cache) and the ``seed`` of the tokenizers' sample of them."""

    corpora: list[TrainCorpus]
    cleaning: Any
    mixing: dict[str, Any]
    cache_dir: str | None
    seed: int

    def shards(self, corpus, src_tok, tgt_tok, *, rank: int, note, tell, found="ready"):
        """One training corpus in token shards: prepared once into the cache (progress on
        rank 0), else found there (another rank waits for rank 0 on the cache, saying why
        through ``note``); ``tell`` gets the lines that say which, ``found`` naming a cached
        one. Returns :func:`attnlab.data.prepare.cached_corpus`'s answer."""
        from ..data.prepare import cached_corpus
        from ..data.progress import progress_printer

        progress = progress_printer(corpus.name, every_s=10.0, write=note)
        prepared = cached_corpus(
            corpus.src,
            corpus.tgt,
            src_tok,
            tgt_tok,
            cleaning=self.cleaning,
            cache_dir=self.cache_dir,
            progress=progress if rank == 0 else None,
            name=corpus.option,
            wait=None if rank == 0 else note,
        )
        where = found if prepared.cached else f"prepared in {prepared.seconds:.0f} s"
        tell(f"{corpus.name}: shards {where}: {prepared.directory}")
        tell(f"{corpus.name}: {prepared.summary}")
        return prepared

    def examples(self, src_tok, tgt_tok, config, max_len: int, *, rank: int, note):
        """The corpora as examples read from token shards: prepared once (cleaned, encoded on
        every core, with progress) into the cache, reused after (``attnlab train`` prepares
        them before the run starts: :meth:`TranslationTask.prepare`). In a distributed run
        rank 0 prepares them; the other ranks wait for them on the cache (no collective, so
        no timeout), then open them."""
        from ..data.shards import ShardExamples

        directories = [
            self.shards(
                c, src_tok, tgt_tok, rank=rank, note=note, tell=note, found="reused"
            ).directory
            for c in self.corpora
        ]
        framing = {"bos_id": config.bos_id, "eos_id": config.eos_id}
        return ShardExamples(directories, max_len=max_len, **framing, **self.mixing)


@dataclass
class TranslationTask(Task):
    """A translation task: ``src_lang`` -> ``tgt_lang``; training pairs with a side longer
    than ``max_len`` tokens are left out."""

    src_lang: str = "en"
    tgt_lang: str = "de"
    max_len: int = 200

    command: ClassVar[str] = "translate"
    decodes: ClassVar[bool] = True
    fine_tunable: ClassVar[bool] = True
    distillable: ClassVar[bool] = True

    def heading(self) -> str:
        return f"{self.name} {self.src_lang}->{self.tgt_lang}"

    def describe(self, data: Any) -> str:
        splits = ", ".join(f"{k} {len(v):,}" for k, v in data.splits.items())
        return f"task {data.name} {data.src_lang}->{data.tgt_lang}: {splits}"

    def config_for(self, ctx: TaskContext, src_vocab: int = 0, tgt_vocab: int = 0):
        """A fresh model's config, or a fine-tuning run's: its starting model's with the job's
        dropout rates."""
        if ctx.init_from is None:
            return super().config_for(ctx, src_vocab, tgt_vocab)
        rates = {k: v for k, v in ctx.model.items() if k in FINE_TUNABLE}
        return dataclasses.replace(starting_config(ctx.init_from), **rates)

    def objective(self) -> type:
        from ..train.objectives import TranslationObjective

        return TranslationObjective

    def validation_columns(self, ctx: TaskContext) -> tuple[str, ...]:
        own = super().validation_columns(ctx)
        return own if ctx.eval.bleu_sentences == 0 else own + TRANSLATION_VALIDATION

    def keep_best_hint(self, ctx: TaskContext, column: str) -> str:
        if column in TRANSLATION_VALIDATION:
            return f" ({', '.join(TRANSLATION_VALIDATION)} need [eval] bleu_sentences > 0)"
        return ""

    # -- training --------------------------------------------------------------------------

    def disk_plan(self) -> DiskPlan | None:
        """The training split on disk (:class:`DiskPlan`), or None: it is ``data["train"]``,
        in memory. A task that has one also gives ``with_corpora(corpora)``: itself training
        on other corpora (a student's distilled ones, :mod:`attnlab.tasks.distill`)."""
        return None

    def train_texts(self, data: Any) -> tuple[list[str], list[str]]:
        """The training split's sources and targets, for the tokenizers."""
        train = data["train"]
        return [s for s, _ in train], [t for _, t in train]

    def train_tokenizers(self, ctx: TaskContext, data: Any, *, wait=None):
        """BPE tokenizers on the training split: one joint, or one per side (on disk: on a
        seeded sample of ``[tokenizer] sample_size`` pairs, in the shares of the corpora's
        mixture; ``wait``: another process trains them, this one waits for them)."""
        from ..data.tokenizer import Tokenizer

        options = ctx.tokenizer
        plan = self.disk_plan()
        if plan is not None:  # trained once per files and options, then cached
            from ..data.tokenizer_sample import cached_tokenizers

            src, tgt, _ = cached_tokenizers(
                [c.src for c in plan.corpora],
                [c.tgt for c in plan.corpora],
                options.vocab_size,
                joint=options.joint,
                sample_size=options.sample_size,
                seed=plan.seed,
                min_frequency=options.min_frequency,
                name=plan.corpora[0].option,
                cache_dir=plan.cache_dir,
                wait=wait,
                **plan.mixing,
            )
            return src, tgt
        kwargs = {"min_frequency": options.min_frequency}
        sources, targets = self.train_texts(data)
        if options.joint:
            texts = [s for pair in zip(sources, targets, strict=True) for s in pair]
            shared = Tokenizer.train(texts, options.vocab_size, **kwargs)
            return shared, shared
        return (
            Tokenizer.train(sources, options.vocab_size, **kwargs),
            Tokenizer.train(targets, options.vocab_size, **kwargs),
        )

    def prepare(
        self,
        ctx: TaskContext,
        *,
        note,
        rank: int = 0,
        resume: bool = False,
        verify: bool = False,
    ) -> bool:
        """The corpora on disk made ready for training, before it starts: their digests
        (``verify``: read in full, else remembered by the cache), the tokenizers (the run's
        own when resuming into ``out``, the starting model's when fine-tuning, else trained
        on the sample, into the cache) and the shards, into the cache :meth:`setup` then
        opens. Rank 0 prepares; another rank waits for it on the cache, without a deadline.
        A student (``[distill]``) first has its teachers' translations made, or found, in the
        cache (:mod:`attnlab.tasks.distill`), whatever its task. False: the task has nothing
        on disk to prepare."""
        if ctx.distill is not None:  # a student: the teachers' translations, made first
            from .distill import student_task

            data = self.load() if self.disk_plan() is None else None
            student, _, _ = student_task(
                self, ctx.distill, ctx.eval.max_tokens, data, rank=rank, note=note
            )
            student.prepare(ctx.student(), note=note, rank=rank, resume=resume, verify=verify)
            return True
        from ..data.shardformat import cache_root
        from ..data.textfiles import check_parallel

        plan = self.disk_plan()
        if plan is None:
            return False
        root = cache_root(plan.cache_dir)
        for corpus in plan.corpora:
            check_parallel(
                corpus.src, corpus.tgt, corpus.option, utf8=False, cache_dir=root, verify=verify
            )
        wait = None if rank == 0 else note  # another rank says only why it waits
        tell = note if rank == 0 else lambda line: None
        if resume and (ctx.out / "tokenizers").is_dir():
            from ..data.tokenizer import load_tokenizers

            src_tok, tgt_tok = load_tokenizers(ctx.out / "tokenizers")
        elif ctx.init_from is not None:
            src_tok, tgt_tok = _starting_tokenizers(ctx.init_from)
        else:
            src_tok, tgt_tok = self.train_tokenizers(ctx, None, wait=wait)
        tell(f"tokenizers: {src_tok.vocab_size:,} subwords")
        for corpus in plan.corpora:
            plan.shards(corpus, src_tok, tgt_tok, rank=rank, note=note, tell=tell)
        return True

    def tokenizers(self, ctx: TaskContext, data: Any, directory: Path, *, resume: bool, rank: int):
        """Trained on the training split (a fine-tuning run keeps its starting model's)."""

        def train():
            if ctx.init_from is None:
                return self.train_tokenizers(ctx, data)
            return _starting_tokenizers(ctx.init_from)

        return shared_tokenizers(directory, reuse=resume, rank=rank, train=train)

    def examples(self, data: Any, split: str, src_tok, tgt_tok, config):
        """The framed examples of ``split`` (from pad, EOS 0 for a Marian model)."""
        from ..data.examples import make_examples

        pairs = data[split]
        src = src_tok.encode_batch([s for s, _ in pairs])
        tgt = tgt_tok.encode_batch([t for _, t in pairs])
        framing = {"bos_id": config.bos_id, "eos_id": config.eos_id}
        return make_examples(list(zip(src, tgt, strict=True)), max_len=self.max_len, **framing)

    def setup(self, ctx: TaskContext, data: Any, *, resume: bool, rank: int, note) -> Setup:
        from ..models.transformer import Transformer

        if ctx.distill is not None:  # a student: the teachers' translations are its data
            from .distill import student_task

            student, data, record = student_task(
                self, ctx.distill, ctx.eval.max_tokens, data, rank=rank, note=note
            )
            setup = student.setup(ctx.student(), data, resume=resume, rank=rank, note=note)
            setup.extras["distill"] = record
            return setup
        bleu = self.bleu_options(ctx)  # before any work: a tokenizer's missing package
        directory = ctx.out / "tokenizers"
        src_tok, tgt_tok = self.tokenizers(ctx, data, directory, resume=resume, rank=rank)
        joint = " (joint)" if ctx.tokenizer.joint else ""
        note(f"tokenizers: {src_tok.vocab_size:,} subwords{joint}")
        config = self.config_for(ctx, src_tok.vocab_size, tgt_tok.vocab_size)
        if ctx.init_from is not None:
            model = _starting_model(ctx.init_from, config, src_tok, tgt_tok)
        else:
            model = seeded(ctx.seed, lambda: Transformer(config))
        c, plan = model.config, self.disk_plan()
        if plan is None:
            train = self.examples(data, "train", src_tok, tgt_tok, c)
        else:
            train = plan.examples(src_tok, tgt_tok, c, self.max_len, rank=rank, note=note)
        valid = self.examples(data, "valid", src_tok, tgt_tok, c)
        valid_pairs = data["valid"][: ctx.eval.bleu_sentences]

        def on_evaluate(step: int, trained) -> dict[str, float]:
            """BLEU and exact match of greedy translations of the first validation pairs."""
            if not valid_pairs:
                return {}
            greedy = DecodingOptions(beam_size=1)
            scores = validation_scores(trained, src_tok, tgt_tok, valid_pairs, greedy, **bleu)
            found = (scores["bleu"], scores["exact_match"], scores["chrf"])
            return dict(zip(TRANSLATION_VALIDATION, found, strict=True))

        setup = Setup(model, train, valid, on_evaluate, directory)
        if ctx.init_from is not None and rank == 0 and not resume:
            before = validation_scores(
                model, src_tok, tgt_tok, data["valid"], ctx.eval.decoding, **bleu
            )
            setup.extras["valid_before"] = before
            note(f"starting model ({ctx.init_from}): {_scores_text('valid', before)}")
        names = [c.name for c in plan.corpora] if plan is not None else []
        padding, setup.batcher = note_token_examples(
            ctx, model, train, self.max_len, note, corpora=names
        )
        setup.extras["padding_fraction"] = padding
        return setup

    def bleu_options(self, ctx: TaskContext) -> dict[str, Any]:
        """How BLEU tokenises this task's translations (``tgt_lang`` and ``bleu_tokenize`` of
        :func:`attnlab.inference.scores.score`): the target language's tokenizer, as sacreBLEU's
        command line picks it, or the job's ``[eval] bleu_tokenize``. Its packages are checked
        here (an ImportError naming the extra that installs them)."""
        from ..inference.scores import bleu_metric, bleu_tokenizer

        bleu_metric(bleu_tokenizer(self.tgt_lang, ctx.eval.bleu_tokenize))
        return {"tgt_lang": self.tgt_lang, "bleu_tokenize": ctx.eval.bleu_tokenize}

    def after_training(
        self, ctx: TaskContext, model_dir: Path, data: Any, setup: Setup, note
    ) -> None:
        if ctx.init_from is None:
            return
        tuned = self.evaluate(model_dir, data, ctx, split="valid")
        note(f"fine-tuned model: {_scores_text('valid', tuned)}")
        setup.extras["init_from"] = ctx.init_from
        setup.extras["valid_after"] = {k: tuned[k] for k in ("bleu", "chrf", "exact_match")}

    # -- scoring ---------------------------------------------------------------------------

    def scores(
        self,
        model_dir: Path,
        items: Any,
        limit: int | None,
        ctx: TaskContext,
        *,
        examples: int,
        device: str | None,
        decoding: DecodingOptions | None,
        engine: str,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """BLEU, chrF and exact match of beam-search translations of a split's pairs
        (``decoding``: None for the job's ``[eval]``), with the literature's tokenised
        BLEU beside them and a few examples."""
        from ..inference.scores import score
        from ..inference.translator import Translator

        pairs = items if limit is None else items[:limit]
        decoding = ctx.eval.decoding if decoding is None else decoding
        translator = Translator.load(
            model_dir,
            decoding=decoding,
            max_tokens=ctx.eval.max_tokens,
            device=device,
            engine=engine,
        )
        hyps = translator.translate([s for s, _ in pairs])
        refs = [t for _, t in pairs]
        scores = score(hyps, refs, tokenized_lang=self.tgt_lang, **self.bleu_options(ctx))
        shown = list(zip(pairs, hyps, strict=True))[:examples]
        return scores.to_dict(), {
            "beam_size": decoding.beam_size,
            "alpha": decoding.alpha,
            "examples": [{"source": s, "reference": t, "hypothesis": h} for (s, t), h in shown],
        }

    @classmethod
    def report(
        cls,
        result: Mapping[str, Any],
        *,
        show: int = 3,
        beam_size: int | None = None,
        tokenized: bool = False,
    ) -> list[str]:
        decoding = _decoding(result.get("beam_size", beam_size), result.get("alpha"))
        lines = [
            f"{result['split']} ({result['sentences']:,} sentences{decoding}): {_scores(result)}"
        ]
        if result.get("note"):
            lines.append(f"  note: {result['note']} (BLEU {result['bleu']:.2f})")
        lines.append(f"  BLEU signature: {result['bleu_signature']}")
        lines.append(f"  chrF signature: {result['chrf_signature']}")
        if tokenized and result.get("bleu_tokenized") is not None:
            lines.append(
                f"  BLEU lowercased and Moses-tokenised (the text-only literature's): "
                f"{result['bleu_tokenized']:.2f}; signature: {result['bleu_tokenized_signature']}"
            )
        for example in result.get("examples", [])[:show]:
            source, hypothesis = example["source"], example["hypothesis"]
            lines.append(f"  {source!r} -> {hypothesis!r} (reference {example['reference']!r})")
        return lines

    @classmethod
    def json_view(
        cls, result: Mapping[str, Any], *, tokenized: bool = False, model: str = "the model"
    ) -> dict[str, Any]:
        if tokenized and result.get("bleu_tokenized") is None:
            raise ValueError(
                f"--tokenized-bleu: {model}'s task names no target language (task.tgt_lang "
                f"of its job.json), which Moses tokenisation needs"
            )
        keys = ("bleu", "chrf", "exact_match", "sentences", "split", "task", "beam_size", "alpha")
        keys += ("headline", "short_references", "note", "bleu_signature", "chrf_signature")
        if tokenized:
            keys += ("bleu_tokenized", "bleu_tokenized_signature")
        return {k: result[k] for k in keys}

    def score_line(self, result: Mapping[str, Any]) -> str:
        return (
            f"{result['split']}: BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}, exact "
            f"match {result['exact_match']:.1%}"
        )


def _scores(result: Mapping[str, Any]) -> str:
    """The translation scores on one line, the headline first (inference.scores.headline)."""
    shown = {
        "bleu": f"BLEU {result['bleu']:.2f}",
        "chrf": f"chrF {result['chrf']:.2f}",
        "exact_match": f"exact match {result['exact_match']:.1%}",
    }
    lead = [shown.pop(key) for key in result.get("headline", ("bleu", "chrf"))]
    return ", ".join(lead) + (f"; {', '.join(shown.values())}" if shown else "")


def _decoding(beam_size: object, alpha: object = None) -> str:
    """The decoder, for the summary line: ', greedy', ', beam search (4)', ', beam search (4,
    alpha 1.0)' when the length penalty is known, or '' if the beam is unknown."""
    if not isinstance(beam_size, int):
        return ""
    if beam_size == 1:
        return ", greedy"
    penalty = f", alpha {alpha:g}" if isinstance(alpha, int | float) else ""
    return f", beam search ({beam_size}{penalty})"


def _scores_text(split: str, scores: Mapping[str, Any]) -> str:
    return (
        f"{split} BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, exact match "
        f"{scores['exact_match']:.1%}"
    )


def starting_config(init_from: str):
    """The config of ``[model] init_from``'s model, as saved (checked to be an encoder-decoder
    translation model with its tokenizers)."""
    from ..inference.modeldir import resolve_model_dir
    from ..models.saved import read_config

    directory = resolve_model_dir(init_from, name="[model] init_from")
    try:
        model_type, config = read_config(directory)
    except (OSError, ValueError) as e:
        raise ValueError(f"[model] init_from: {e}") from None
    if model_type != "transformer":
        raise ValueError(
            f"[model] init_from: {directory} holds a {model_type!r} model; fine-tuning "
            f"takes an encoder-decoder translation model"
        )
    return config


def _starting_tokenizers(init_from: str):
    """The tokenizers of ``[model] init_from``'s model, which a fine-tuning run keeps."""
    from ..data.tokenizer import load_tokenizers
    from ..inference.modeldir import resolve_model_dir

    return load_tokenizers(resolve_model_dir(init_from, name="[model] init_from"))


def _starting_model(init_from: str, config, src_tok, tgt_tok):
    """The model a fine-tuning run starts from: ``init_from``'s weights in a model of
    ``config`` (its own with the job's dropout rates), checked against the tokenizers it came
    with."""
    from ..inference.modeldir import load_with_tokenizers, resolve_model_dir
    from ..models.transformer import Transformer

    start = resolve_model_dir(init_from, name="[model] init_from")
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
    model = Transformer(config)
    model.load_state_dict(loaded.state_dict())
    return model


def validation_scores(
    model,
    src_tok,
    tgt_tok,
    pairs,
    decoding: DecodingOptions,
    *,
    tgt_lang: str | None = None,
    bleu_tokenize: str | None = None,
) -> dict[str, float]:
    """BLEU, chrF and exact match of ``model``'s translations of the validation ``pairs``
    decoded with ``decoding`` (the model is left in the mode it was found in): the hook's
    greedy scores during training, and a fine-tuning run's before and after with the final
    test's decoding."""
    from ..inference.scores import score
    from ..inference.translator import Translator

    translator = Translator(model, src_tok, tgt_tok, decoding=decoding)
    hyps = translator.translate([s for s, _ in pairs])
    scores = score(hyps, [t for _, t in pairs], tgt_lang=tgt_lang, bleu_tokenize=bleu_tokenize)
    return {"bleu": scores.bleu, "chrf": scores.chrf, "exact_match": scores.exact_match}
