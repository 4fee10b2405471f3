"""The ``text`` task: a decoder-only language model (:class:`attnlab.TransformerLM`) on the
non-blank lines of ``text_file``, ``valid_fraction`` of them held out (a seeded shuffle);
scored by perplexity on the held-out lines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .base import Setup, Task, note_token_examples, register_task, seeded, shared_tokenizers
from .context import TaskContext

__all__ = ["Text"]


@register_task
@dataclass
class Text(Task):
    name: str = "text"
    text_file: str | None = None
    valid_fraction: float = 0.05
    seed: int = 0
    max_len: int = 200

    metric: ClassVar[str] = "perplexity"

    def check(self) -> None:
        if not self.text_file:
            raise ValueError("[task] text_file: required for the 'text' task (one plain text file)")
        if not Path(self.text_file).is_file():
            raise FileNotFoundError(f"[task] text_file: {self.text_file}: no such file")

    def load(self) -> Any:
        from ..data import corpora

        self.check()
        return corpora.text_corpus(
            self.text_file, valid_fraction=self.valid_fraction, seed=self.seed
        )

    def model_config(self, model: Mapping[str, Any], joint: bool, src_vocab: int, tgt_vocab: int):
        return super().model_config(model, True, src_vocab, src_vocab)  # one vocabulary

    def objective(self) -> type:
        from ..train.objectives import LanguageModelObjective

        return LanguageModelObjective

    def setup(self, ctx: TaskContext, data: Any, *, resume: bool, rank: int, note) -> Setup:
        from ..data.examples import make_lm_examples
        from ..data.tokenizer import Tokenizer
        from ..models.transformer import TransformerLM

        directory = ctx.out / "tokenizers"

        def train():  # one vocabulary for the one stream of text
            options = ctx.tokenizer
            tokenizer = Tokenizer.train(
                data["train"], options.vocab_size, min_frequency=options.min_frequency
            )
            return tokenizer, tokenizer

        tokenizer, _ = shared_tokenizers(directory, reuse=resume, rank=rank, train=train)
        joint = " (joint)" if ctx.tokenizer.joint else ""
        note(f"tokenizers: {tokenizer.vocab_size:,} subwords{joint}")

        def encode(split: str):
            return make_lm_examples(tokenizer.encode_batch(data[split]), max_len=self.max_len)

        config = self.config_for(ctx, tokenizer.vocab_size, tokenizer.vocab_size)
        model = seeded(ctx.seed, lambda: TransformerLM(config))
        train_examples = encode("train")
        padding, batcher = note_token_examples(ctx, model, train_examples, self.max_len, note)
        setup = Setup(model, train_examples, encode("valid"), None, directory, batcher=batcher)
        setup.extras["padding_fraction"] = padding
        return setup

    def final_split(self, data: Any) -> str | None:
        return "valid"

    def scores(
        self,
        model_dir: Path,
        items: Any,
        limit: int | None,
        ctx: TaskContext,
        *,
        device: str | None,
        **_: Any,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Perplexity of the model on the lines of a split."""
        from ..inference.modeldir import load_with_tokenizers
        from ..inference.scores import lm_perplexity

        model, tokenizer, _ = load_with_tokenizers(model_dir, device=device)
        return lm_perplexity(model, tokenizer, items[:limit] if limit else items), {}

    @classmethod
    def report(cls, result: Mapping[str, Any], **_: Any) -> list[str]:
        return [
            f"{result['split']} ({result['sentences']:,} lines, {result['tokens']:,} tokens): "
            f"perplexity {result['perplexity']:.2f} (cross-entropy {result['loss']:.4f} nats)"
        ]

    def score_line(self, result: Mapping[str, Any]) -> str:
        return f"{result['split']}: perplexity {result['perplexity']:.2f}"
