"""``attnlab generate``: text from a language model (``attnlab train --task text``), greedy or
sampled, streamed as each token comes."""

from __future__ import annotations

import argparse
import sys

from ._args import (
    add_device_flag,
    add_max_new_tokens_flag,
    add_model_flag,
    add_sampling_flags,
    add_seed_flag,
    device_of,
)
from ._model import check_kind, resolving


def cmd_generate(args: argparse.Namespace) -> int:
    """Continue the prompt with one :func:`attnlab.decode.search.sample` or
    :func:`~attnlab.decode.search.greedy_search` call on the model's KV cache, writing the text as
    each token comes (its ``on_token`` hook): the prompt is encoded once, not once a token."""
    import torch

    from ..decode.search import greedy_search, sample
    from ..inference.modeldir import load_with_tokenizers

    if not args.sample and (args.temperature != 1.0 or args.top_k or args.top_p):
        raise ValueError("--temperature, --top-k, --top-p: only with --sample")
    device = device_of(args.device)
    check_kind(args.model, {"lm"}, "generate", "--model")
    model, tokenizer, _ = load_with_tokenizers(args.model, device=device)
    config = model.config
    prompt = [config.bos_id, *tokenizer.encode(args.prompt)]
    new: list[int] = []
    shown = ""

    def show(_rows: torch.Tensor, tokens: torch.Tensor) -> None:
        nonlocal shown
        token = int(tokens[0])
        if token == config.eos_id:
            return
        new.append(token)
        text = tokenizer.decode(new)
        if text.startswith(shown):  # a partial character shows once it is whole
            sys.stdout.write(text[len(shown) :])
            sys.stdout.flush()
            shown = text

    if args.sample:
        generator = torch.Generator(device=next(model.parameters()).device)
        generator.manual_seed(args.seed)
        sample(
            model,
            [prompt],
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            generator=generator,
            on_token=show,
        )
    else:
        greedy_search(model, [prompt], max_new_tokens=args.max_new_tokens, on_token=show)
    text = tokenizer.decode(new)
    sys.stdout.write(text[len(shown) :] if text.startswith(shown) else "\n" + text)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def add_parsers(sub) -> None:
    generate = sub.add_parser(
        "generate",
        help="continue a prompt with a language model (attnlab train --task text)",
        description=(
            "Continue PROMPT with a TransformerLM trained by `attnlab train --task text`, "
            "greedily or by sampling (--sample), writing the text to standard output as each "
            "token comes. MODEL may be OUT/model, a checkpoint or a run OUT."
        ),
    )
    add_model_flag(generate)
    generate.add_argument("prompt", nargs="?", default="", help="the text to continue ('')")
    add_max_new_tokens_flag(generate)
    add_sampling_flags(generate)  # without --sample: greedy
    add_seed_flag(generate)
    add_device_flag(generate)
    generate.set_defaults(func=resolving(cmd_generate))
