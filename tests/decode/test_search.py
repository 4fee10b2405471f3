"""Decoding: greedy search, beam search and sampling (attnlab.decode.search).

What is checked: beam search with a beam wide enough to keep every hypothesis returns the best
sequence of an exhaustive enumeration (scored by teacher forcing, with the length penalty), and
its early stopping never changes the result of a narrower beam (against a reference search that
runs to the end); a batch decodes exactly as its rows one at a time (padding never leaks); EOS,
the default and minimum lengths and ``Generation.tolist``; sampling's filters and
reproducibility; the model's mode is restored; bad arguments fail naming the argument.

Untrained models rarely emit EOS, so where EOS matters the output embedding's EOS row is scaled
up (``tie_output=False``, so that only ``lm_head`` changes): greedy and beam search then end rows
at different steps. An untrained model's next-token distribution is nearly uniform, so for
sampling EOS is also given a constant share of the logits (:func:`eos_frequent`).

Tolerance: 1e-5 absolute on log-probabilities and scores (float32), plus 1e-6 relative for sums
over long outputs (one float32 ulp of a 57-token log-probability near -180 is already 1.5e-5).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from _helpers import left_padded, right_padded, tiny, token_ids
from attnlab import (
    Generation,
    Transformer,
    TransformerConfig,
    TransformerEncoder,
    TransformerLM,
    beam_search,
    greedy_search,
    sample,
)
from attnlab.decode.search import length_penalty

ATOL = 1e-5
PAD, BOS, EOS = 0, 1, 2
MODELS = {"transformer": Transformer, "lm": TransformerLM}
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]


# -- helpers ---------------------------------------------------------------------------------


def build(kind: str, config: TransformerConfig | None = None, seed: int = 0):
    torch.manual_seed(seed)
    return MODELS[kind](config or tiny()).eval()


# (seed, scale) per model type: greedy search then ends some rows, at different steps, and
# leaves one unfinished (a Transformer's lengths 3, 12 and 52; a language model's 50, 6, 9).
EOS_LIKELY = {"transformer": (1, 2.5), "lm": (1, 2.0)}


def eos_likely(kind: str, seed: int | None = None, scale: float | None = None):
    """A model whose output embedding's EOS row is scaled up, so that some rows finish early."""
    seed = EOS_LIKELY[kind][0] if seed is None else seed
    scale = EOS_LIKELY[kind][1] if scale is None else scale
    model = build(kind, tiny(tie_output=False), seed)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= scale
    return model


def eos_frequent(kind: str):
    """A model that gives EOS a sizeable probability at many steps, so that samples end: the
    last layer's output gets a constant direction ``u`` (its final LayerNorm's bias), and the
    EOS row of the output embedding is ``4 u``."""
    model = build(kind, tiny(tie_output=False), seed={"transformer": 0, "lm": 1}[kind])
    u = torch.randn(model.config.d_model, generator=torch.Generator().manual_seed(99))
    u /= u.norm()
    with torch.no_grad():
        model.decoder.layers[-1].norm3.bias += u
        model.lm_head.weight[EOS] = 4.0 * u
    return model


def sources(seed: int = 0) -> Tensor:
    """Three sources with different amounts of padding: 7, 4 and 2 real tokens."""
    src = token_ids(3, 7, seed)
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    return src


def inputs_of(kind: str) -> Tensor | list[list[int]]:
    return sources() if kind == "transformer" else PROMPTS


def rows_of(inputs: Tensor | list[list[int]]) -> list[list[int]]:
    """Each input's real tokens."""
    if isinstance(inputs, Tensor):
        return [[t for t in row.tolist() if t != PAD] for row in inputs]
    return [list(row) for row in inputs]


def step_log_probs(model, row: list[int], seqs: list[list[int]]) -> list[Tensor]:
    """Teacher-forced float64 log-probabilities ``(len(seq), V)`` of each generated sequence in
    ``seqs`` after the input ``row`` (a source, or an LM prompt), in one batched call."""
    width = max(len(s) for s in seqs)
    with torch.no_grad():
        if isinstance(model, Transformer):
            tgt = torch.tensor([[BOS, *s[:-1]] + [PAD] * (width - len(s)) for s in seqs])
            src = torch.tensor([row]).expand(len(seqs), -1)
            logits = model(src, tgt)
        else:
            ids = torch.tensor([row + s[:-1] + [PAD] * (width - len(s)) for s in seqs])
            logits = model(ids)[:, len(row) - 1 :]
    log_probs = F.log_softmax(logits.double(), dim=-1)
    return [log_probs[i, : len(s)] for i, s in enumerate(seqs)]


def sequence_log_prob(model, row: list[int], seqs: list[list[int]]) -> list[float]:
    """Teacher-forced log P of each sequence (EOS included when it ends with it)."""
    tables = step_log_probs(model, row, seqs)
    return [
        float(t[torch.arange(len(s)), torch.tensor(s)].sum())
        for t, s in zip(tables, seqs, strict=True)
    ]


def check_well_formed(out: Generation, batch: int) -> None:
    """The invariants of every Generation."""
    assert out.sequences.dtype == torch.long and out.sequences.shape[0] == batch
    assert out.sequences.shape[1] == int(out.lengths.max())
    for seq, length, done in zip(out.sequences, out.lengths, out.finished, strict=True):
        n = int(length)
        assert n >= 1
        assert bool((seq[n:] == PAD).all())
        body = seq[:n]
        assert not bool(((body == PAD) | (body == BOS)).any())  # never generated
        eos_at = (body == EOS).nonzero().flatten().tolist()
        assert eos_at == ([n - 1] if bool(done) else [])  # ends at its first EOS, or unfinished
    lists, with_eos = out.tolist(), out.tolist(keep_eos=True)
    for i in range(batch):
        n = int(out.lengths[i])
        assert with_eos[i] == out.sequences[i, :n].tolist()
        assert lists[i] == (with_eos[i][:-1] if bool(out.finished[i]) else with_eos[i])


def near(actual: Tensor | float, expected: Tensor | float) -> bool:
    """Equal within 1e-5, plus 1e-6 relative for long sums of float32 log-probabilities."""
    actual, expected = float(actual), float(expected)
    return abs(actual - expected) <= ATOL + 1e-6 * abs(expected)


def check_log_probs(model, inputs, out: Generation) -> None:
    """``log_probs`` are the teacher-forced log P of each row's output."""
    for i, row in enumerate(rows_of(inputs)):
        (expected,) = sequence_log_prob(model, row, [out.tolist(keep_eos=True)[i]])
        assert near(out.log_probs[i], expected), (i, float(out.log_probs[i]), expected)


def greedy(model, inputs, **kw) -> Generation:
    return greedy_search(model, inputs, **kw)


def beam4(model, inputs, **kw) -> Generation:
    return beam_search(model, inputs, beam_size=4, **kw)


def assert_same_generation(a: Generation, b: Generation) -> None:
    assert torch.equal(a.sequences, b.sequences)
    assert torch.equal(a.lengths, b.lengths)
    assert torch.equal(a.finished, b.finished)
    torch.testing.assert_close(a.log_probs, b.log_probs, atol=ATOL, rtol=1e-6)
    torch.testing.assert_close(a.scores, b.scores, atol=ATOL, rtol=1e-6)


def sample_seeded(model, inputs, **kw) -> Generation:
    return sample(model, inputs, generator=torch.Generator().manual_seed(0), **kw)


# -- beam size 1 and greedy search -----------------------------------------------------------


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_beam_size_one_gives_the_greedy_tokens(kind: str, alpha: float):
    model = build(kind)
    inputs = inputs_of(kind)
    g = greedy_search(model, inputs, max_new_tokens=20)
    b = beam_search(model, inputs, beam_size=1, alpha=alpha, max_new_tokens=20)
    assert torch.equal(g.sequences, b.sequences)
    assert torch.equal(g.lengths, b.lengths) and torch.equal(g.finished, b.finished)
    torch.testing.assert_close(g.log_probs, b.log_probs, atol=ATOL, rtol=1e-6)
    # greedy ranks by log P; beam search by log P / lp(length)
    torch.testing.assert_close(g.scores, g.log_probs, atol=0, rtol=0)
    expected = b.log_probs / length_penalty(b.lengths.to(torch.float32), alpha)
    torch.testing.assert_close(b.scores, expected, atol=ATOL, rtol=1e-6)
    if alpha > 0:
        assert not torch.allclose(b.scores, g.scores)


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_beam_size_one_gives_the_greedy_tokens_when_eos_competes(alpha: float):
    """The docstring says beam_size=1 "is greedy search"; with EOS among the likely tokens it
    must still return greedy's tokens."""
    model = eos_likely("transformer", seed=0, scale=2.0)
    src = sources()
    g = greedy_search(model, src)  # lengths 1, 7, 3, all ending with EOS
    b = beam_search(model, src, beam_size=1, alpha=alpha)
    assert bool(g.finished.any())  # the case this test is about
    assert g.tolist(keep_eos=True) == b.tolist(keep_eos=True)


# -- a batch decodes as its rows one at a time -------------------------------------------------


@pytest.mark.parametrize("decode", [greedy, beam4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("eos", [False, True], ids=["plain", "eos-likely"])
def test_transformer_batch_equals_each_sentence_alone(decode: Callable, eos: bool):
    model = eos_likely("transformer") if eos else build("transformer")
    src = sources()
    out = decode(model, src)  # default length: each row its own source length + 50
    check_well_formed(out, 3)
    if eos:
        assert bool(out.finished.any()) and len(set(out.lengths.tolist())) > 1
    for i, row in enumerate(rows_of(src)):
        alone = decode(model, torch.tensor([row]))
        assert out.tolist(keep_eos=True)[i] == alone.tolist(keep_eos=True)[0]
        assert bool(out.finished[i]) == bool(alone.finished[0])
        assert near(out.scores[i], alone.scores[0])
        assert near(out.log_probs[i], alone.log_probs[0])


PROMPT_FORMS = {"list": list, "right-padded": right_padded, "left-padded": left_padded}


@pytest.mark.parametrize("decode", [greedy, beam4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("eos", [False, True], ids=["plain", "eos-likely"])
@pytest.mark.parametrize("form", list(PROMPT_FORMS))
def test_lm_batch_equals_each_prompt_alone(decode: Callable, eos: bool, form: str):
    model = eos_likely("lm") if eos else build("lm")
    batch = PROMPT_FORMS[form](PROMPTS)
    out = decode(model, batch, max_new_tokens=15)
    check_well_formed(out, 3)
    for i, prompt in enumerate(PROMPTS):
        alone = decode(model, [prompt], max_new_tokens=15)
        assert out.tolist(keep_eos=True)[i] == alone.tolist(keep_eos=True)[0]
        assert bool(out.finished[i]) == bool(alone.finished[0])
        assert near(out.scores[i], alone.scores[0])


@pytest.mark.parametrize("positional", ["learned", "rotary", "alibi"])
def test_lm_batch_equals_each_prompt_alone_for_other_positions(positional: str):
    model = build("lm", tiny(positional=positional))
    for decode in (greedy, beam4):
        out = decode(model, PROMPTS, max_new_tokens=8)
        for i, prompt in enumerate(PROMPTS):
            alone = decode(model, [prompt], max_new_tokens=8)
            assert out.tolist()[i] == alone.tolist()[0]
            assert near(out.scores[i], alone.scores[0])


# -- lengths and EOS -------------------------------------------------------------------------


@pytest.mark.parametrize("decode", [greedy, beam4], ids=["greedy", "beam4"])
def test_default_max_length_is_source_length_plus_50(decode: Callable):
    model = build("transformer")
    src = sources()
    out = decode(model, src)
    check_well_formed(out, 3)
    limit = (src != PAD).sum(dim=1) + 50  # 57, 54, 52
    assert bool((out.lengths <= limit).all())
    unfinished = ~out.finished
    assert bool(unfinished.any())  # an untrained model: rows run to their limit
    assert torch.equal(out.lengths[unfinished], limit[unfinished])


def test_lm_default_max_new_tokens_is_50():
    out = greedy_search(build("lm"), PROMPTS)
    assert bool((out.lengths <= 50).all())
    assert bool((~out.finished).any())  # an untrained model: rows run to the limit
    assert bool((out.lengths[~out.finished] == 50).all())


@pytest.mark.parametrize("kind", list(MODELS))
def test_learned_positions_cap_the_output_length(kind: str):
    model = build(kind, tiny(positional="learned", max_len=8))
    inputs = [[5, 6, 7], [8, 9, 10, 11, 12]]
    for decode in (greedy, beam4):
        out = decode(model, inputs, max_new_tokens=20)
        # a Transformer's output positions are 0 .. max_len - 1; a language model continues
        # its prompt of P tokens up to position max_len - 1: max_len - P + 1 new tokens
        expected = [8, 8] if kind == "transformer" else [6, 4]
        assert out.lengths.tolist() == expected
        assert not bool(out.finished.any())


DECODERS = {"greedy": greedy, "beam4": beam4, "sample": sample_seeded}


def eos_model(kind: str, decoder: str):
    """A model whose outputs end with EOS at various steps under this decoder."""
    return eos_frequent(kind) if decoder == "sample" else eos_likely(kind)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_min_new_tokens_equal_to_max_gives_exactly_that_many(kind: str, decoder: str):
    model, decode = eos_model(kind, decoder), DECODERS[decoder]
    inputs = inputs_of(kind)
    free = decode(model, inputs, max_new_tokens=10)
    assert bool((free.finished & (free.lengths < 10)).any())  # EOS would come early
    out = decode(model, inputs, max_new_tokens=10, min_new_tokens=10)
    check_well_formed(out, 3)
    assert out.lengths.tolist() == [10, 10, 10]
    assert not bool(out.finished.any())
    assert not bool((out.sequences == EOS).any())
    assert out.tolist() == out.tolist(keep_eos=True) == out.sequences.tolist()


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_min_new_tokens_delays_eos(kind: str, decoder: str):
    model, decode = eos_model(kind, decoder), DECODERS[decoder]
    inputs = inputs_of(kind)
    free = decode(model, inputs, max_new_tokens=30)
    early = int(free.lengths[free.finished].min())
    out = decode(model, inputs, max_new_tokens=30, min_new_tokens=early + 2)
    check_well_formed(out, 3)
    assert bool((out.lengths >= early + 2).all())


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_eos_ends_a_row(kind: str, decoder: str):
    model, decode = eos_model(kind, decoder), DECODERS[decoder]
    inputs = inputs_of(kind)
    out = decode(model, inputs)
    check_well_formed(out, 3)
    assert bool(out.finished.any())
    for i in out.finished.nonzero().flatten().tolist():
        n = int(out.lengths[i])
        assert int(out.sequences[i, n - 1]) == EOS
        assert out.tolist()[i] == out.sequences[i, : n - 1].tolist()  # EOS dropped
        assert out.tolist(keep_eos=True)[i][-1] == EOS
        assert bool((out.sequences[i, n:] == PAD).all())
    check_log_probs(model, inputs, out)
    if decoder == "beam4":
        lp = length_penalty(out.lengths.to(torch.float32), 0.6)
        torch.testing.assert_close(out.scores, out.log_probs / lp, atol=ATOL, rtol=1e-6)
    else:
        torch.testing.assert_close(out.scores, out.log_probs, atol=0, rtol=0)


def test_generation_tolist():
    out = Generation(
        sequences=torch.tensor([[4, 5, EOS, PAD], [6, 7, 8, 9], [EOS, PAD, PAD, PAD]]),
        lengths=torch.tensor([3, 4, 1]),
        log_probs=torch.zeros(3),
        scores=torch.zeros(3),
        finished=torch.tensor([True, False, True]),
        eos_id=EOS,
    )
    assert out.tolist() == [[4, 5], [6, 7, 8, 9], []]
    assert out.tolist(keep_eos=True) == [[4, 5, EOS], [6, 7, 8, 9], [EOS]]


# -- beam search against an exhaustive enumeration --------------------------------------------

SMALL = {
    "vocab_size": 6,  # pad 0, bos 1, eos 2: four generable tokens {2, 3, 4, 5}
    "d_model": 8,
    "num_heads": 2,
    "d_ff": 16,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "dropout": 0.0,
    "max_len": 16,
}
GENERABLE = [EOS, 3, 4, 5]
MAX_NEW = 3


def every_output(max_new: int = MAX_NEW) -> list[list[int]]:
    """Every possible output: up to max_new tokens ending at their first EOS, or max_new tokens
    without EOS."""
    out = []
    for n in range(1, max_new + 1):
        for seq in itertools.product(GENERABLE, repeat=n):
            if EOS in seq[:-1] or (n < max_new and seq[-1] != EOS):
                continue
            out.append(list(seq))
    return out


def test_the_enumeration_is_complete():
    outputs = every_output()
    assert len(outputs) == 1 + 3 + 3 * 3 * 4  # EOS at 1, at 2, then any 3rd token
    assert len({tuple(s) for s in outputs}) == len(outputs)


EXHAUSTIVE_INPUTS = {
    "transformer": torch.tensor([[3, 4, 5, 3, 4], [5, 3, PAD, PAD, PAD]]),
    "lm": [[3, 4, 5], [5]],
}


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("alpha", [0.6, 0.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_finds_the_best_of_every_possible_output(kind: str, alpha: float, seed: int):
    model = build(kind, TransformerConfig(**SMALL), seed)
    inputs = EXHAUSTIVE_INPUTS[kind]
    outputs = every_output()
    wide = beam_search(model, inputs, beam_size=64, alpha=alpha, max_new_tokens=MAX_NEW)
    narrow = beam_search(model, inputs, beam_size=4, alpha=alpha, max_new_tokens=MAX_NEW)
    check_well_formed(wide, 2)
    check_well_formed(narrow, 2)
    for i, row in enumerate(rows_of(inputs)):
        log_p = sequence_log_prob(model, row, outputs)
        scores = {
            tuple(s): lp / length_penalty(len(s), alpha)
            for s, lp in zip(outputs, log_p, strict=True)
        }
        ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)
        (best_seq, best), (_, runner_up) = ranked[0], ranked[1]

        got = tuple(wide.tolist(keep_eos=True)[i])
        assert got in scores
        assert abs(float(wide.scores[i]) - best) <= ATOL
        assert abs(scores[got] - best) <= ATOL  # the argmax, up to ties
        if best - runner_up > 1e-4:
            assert got == best_seq
        assert abs(float(wide.log_probs[i]) - log_p[outputs.index(list(got))]) <= ATOL
        assert bool(wide.finished[i]) == (got[-1] == EOS)

        # a narrower beam can do no better, and its score is its sequence's true score
        small = tuple(narrow.tolist(keep_eos=True)[i])
        assert float(narrow.scores[i]) <= best + ATOL
        assert abs(float(narrow.scores[i]) - scores[small]) <= ATOL


def next_log_probs(model, row: list[int], prefixes: list[list[int]]) -> Tensor:
    """Teacher-forced float64 log-probabilities ``(len(prefixes), V)`` of the token after each
    generated prefix, given the input ``row``."""
    width = max(len(p) for p in prefixes)
    with torch.no_grad():
        if isinstance(model, Transformer):
            tgt = torch.tensor([[BOS, *p] + [PAD] * (width - len(p)) for p in prefixes])
            logits = model(torch.tensor([row]).expand(len(prefixes), -1), tgt)
            last = [len(p) for p in prefixes]
        else:
            logits = model(torch.tensor([row + p + [PAD] * (width - len(p)) for p in prefixes]))
            last = [len(row) + len(p) - 1 for p in prefixes]
    return F.log_softmax(logits[torch.arange(len(prefixes)), last].double(), dim=-1)


def reference_beam_search(
    model, row: list[int], beam: int, alpha: float, max_new: int, *, stop_at_k: bool = False
) -> list[tuple[float, list[int]]]:
    """The documented algorithm, one sentence, written plainly: every live hypothesis is
    extended by every generable token and the extensions ranked by log P; those among the best
    K that end in EOS (or any reaching max_new) finish, the best K others among the top 2K live
    on; the search stops once the best finished score is at least the best live log P over
    lp(max_new), the most any live hypothesis can still reach. With ``stop_at_k`` it stops
    instead once K hypotheses have finished (fairseq's rule, which beam_search does not use).
    Returns every finished hypothesis as (log P / lp, tokens), best first."""
    live: list[tuple[float, list[int]]] = [(0.0, [])]
    done: list[tuple[float, list[int]]] = []
    for length in range(1, max_new + 1):
        table = next_log_probs(model, row, [tokens for _, tokens in live])
        extensions = [
            (log_p + float(table[i, v]), [*tokens, v])
            for i, (log_p, tokens) in enumerate(live)
            for v in GENERABLE
        ]
        top = sorted(extensions, key=lambda e: e[0], reverse=True)[: 2 * beam]
        for rank, (log_p, tokens) in enumerate(top):
            if (tokens[-1] == EOS and rank < beam) or length == max_new:
                done.append((log_p / length_penalty(length, alpha), tokens))
        live = [e for e in top if e[1][-1] != EOS][:beam]
        if not live:
            break
        if stop_at_k and len(done) >= beam:
            break
        best_done = max((d[0] for d in done), default=-math.inf)
        if not stop_at_k and best_done >= live[0][0] / length_penalty(max_new, alpha):
            break
    return sorted(done, key=lambda d: d[0], reverse=True)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("alpha", [0.6, 1.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_beam_search_follows_the_documented_algorithm(
    kind: str, beam: int, alpha: float, seed: int
):
    """The batched search returns what the plain one-sentence search above returns: the same
    candidates finish, the same live on, and a sentence stops once no live hypothesis can beat
    its best finished one."""
    model = build(kind, TransformerConfig(**SMALL), seed)
    inputs = EXHAUSTIVE_INPUTS[kind]
    out = beam_search(model, inputs, beam_size=beam, alpha=alpha, max_new_tokens=8)
    check_well_formed(out, 2)
    for i, row in enumerate(rows_of(inputs)):
        done = reference_beam_search(model, row, beam, alpha, max_new=8)
        best, best_tokens = done[0]
        assert abs(float(out.scores[i]) - best) <= ATOL
        if len(done) == 1 or best - done[1][0] > 1e-4:
            assert out.tolist(keep_eos=True)[i] == best_tokens


@pytest.mark.parametrize(
    ("kind", "seed", "beam", "alpha"),
    [("transformer", 1, 3, 0.6), ("transformer", 23, 2, 0.0), ("lm", 19, 2, 0.6)],
)
def test_beam_search_does_not_stop_on_early_eos_truncations(
    kind: str, seed: int, beam: int, alpha: float
):
    """Cases (found by searching seeds) where K early-EOS hypotheses fill the finished set
    while a better hypothesis is still live: stopping at K finished returns the worse one."""
    model = build(kind, TransformerConfig(**SMALL), seed)
    inputs = EXHAUSTIVE_INPUTS[kind]
    out = beam_search(model, inputs, beam_size=beam, alpha=alpha, max_new_tokens=8)
    improved = 0
    for i, row in enumerate(rows_of(inputs)):
        (best, tokens), *_ = reference_beam_search(model, row, beam, alpha, max_new=8)
        (early, _), *_ = reference_beam_search(model, row, beam, alpha, 8, stop_at_k=True)
        assert abs(float(out.scores[i]) - best) <= ATOL
        assert out.tolist(keep_eos=True)[i] == tokens
        improved += best > early + 1e-3
    assert improved >= 1  # the case still shows the difference


# -- sampling ----------------------------------------------------------------------------------


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("kind", list(MODELS))
def test_sampling_is_reproducible_with_a_seeded_generator(kind: str):
    model = build(kind)
    inputs = inputs_of(kind)
    kw = {"temperature": 1.3, "max_new_tokens": 12}
    a = sample(model, inputs, generator=seeded(7), **kw)
    b = sample(model, inputs, generator=seeded(7), **kw)
    assert_same_generation(a, b)
    c = sample(model, inputs, generator=seeded(8), **kw)
    assert not torch.equal(a.sequences, c.sequences)
    check_well_formed(a, 3)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize(
    "options",
    [{"top_k": 1}, {"temperature": 1e-4}, {"top_p": 1e-6}, {"top_k": 1, "temperature": 5.0}],
    ids=["top_k=1", "temperature=1e-4", "top_p=1e-6", "top_k=1-hot"],
)
def test_degenerate_sampling_is_greedy(kind: str, options: dict):
    model = eos_likely(kind)  # rows of different lengths
    inputs = inputs_of(kind)
    expected = greedy_search(model, inputs, max_new_tokens=25)
    out = sample(model, inputs, generator=seeded(0), max_new_tokens=25, **options)
    assert_same_generation(out, expected)


@pytest.mark.parametrize("kind", list(MODELS))
def test_top_k_samples_only_among_the_k_most_probable(kind: str):
    model = build(kind)
    inputs = inputs_of(kind)
    k = 3
    out = sample(model, inputs, top_k=k, temperature=2.0, generator=seeded(1), max_new_tokens=15)
    for i, row in enumerate(rows_of(inputs)):
        seq = out.tolist(keep_eos=True)[i]
        (table,) = step_log_probs(model, row, [seq])
        table[:, [PAD, BOS]] = -float("inf")  # never generated
        for t, token in enumerate(seq):
            better = int((table[t] > table[t, token]).sum())
            assert better < k, f"row {i} step {t}: token {token} has rank {better}"


@pytest.mark.parametrize("kind", list(MODELS))
def test_top_p_samples_only_inside_the_nucleus(kind: str):
    model = build(kind)
    inputs = inputs_of(kind)
    top_p = 0.2
    out = sample(model, inputs, top_p=top_p, generator=seeded(2), max_new_tokens=15)
    for i, row in enumerate(rows_of(inputs)):
        seq = out.tolist(keep_eos=True)[i]
        (table,) = step_log_probs(model, row, [seq])
        table[:, [PAD, BOS]] = -float("inf")
        probs = table.softmax(dim=-1)
        for t, token in enumerate(seq):
            before = float(probs[t][probs[t] > probs[t, token]].sum())
            assert before < top_p + 1e-6, f"row {i} step {t}: mass before {before}"


@pytest.mark.parametrize("kind", list(MODELS))
def test_sampled_log_probs_are_the_models_unfiltered_log_probs(kind: str):
    model = eos_frequent(kind)
    inputs = inputs_of(kind)
    out = sample(
        model,
        inputs,
        temperature=0.7,
        top_k=50,
        top_p=0.9,
        generator=seeded(3),
        max_new_tokens=20,
    )
    check_well_formed(out, 3)
    assert bool(out.finished.any())
    check_log_probs(model, inputs, out)
    torch.testing.assert_close(out.scores, out.log_probs, atol=0, rtol=0)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("decode", ["greedy", "sample"])
def test_on_token_streams_each_rows_tokens_as_chosen(kind: str, decode: str):
    """The tokens ``on_token`` sees, step by step, are the rows' outputs (EOS included), for
    rows that finish at different steps; streaming changes nothing in the result."""
    model = eos_likely(kind)  # rows of different lengths
    inputs = inputs_of(kind)
    streamed: dict[int, list[int]] = {}

    def collect(rows: Tensor, tokens: Tensor) -> None:
        assert rows.shape == tokens.shape and rows.dim() == 1
        for row, token in zip(rows.tolist(), tokens.tolist(), strict=True):
            streamed.setdefault(row, []).append(token)

    def run(**kw):
        if decode == "greedy":
            return greedy_search(model, inputs, max_new_tokens=25, **kw)
        return sample(model, inputs, generator=seeded(1), max_new_tokens=25, **kw)

    out = run(on_token=collect)
    assert_same_generation(out, run())
    expected = out.tolist(keep_eos=True)
    assert len({len(row) for row in expected}) > 1  # rows did finish at different steps
    assert [streamed[i] for i in range(len(expected))] == expected
    with pytest.raises(TypeError, match="on_token: expected a callable"):
        greedy_search(model, inputs, on_token=3)


# -- the model's mode ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize(
    "decode",
    [greedy, beam4, sample_seeded],
    ids=["greedy", "beam4", "sample"],
)
def test_generation_runs_in_eval_mode_and_restores_training(kind: str, decode: Callable):
    model = build(kind, tiny(dropout=0.3))  # dropout: train mode would change the output
    inputs = inputs_of(kind)
    expected = decode(model.eval(), inputs, max_new_tokens=10)
    assert not model.training
    model.train()
    out = decode(model, inputs, max_new_tokens=10)
    assert model.training
    assert all(m.training for m in model.modules())
    assert torch.is_grad_enabled()
    assert_same_generation(out, expected)
    decode(model.eval(), inputs, max_new_tokens=10)
    assert not any(m.training for m in model.modules())


def test_generation_restores_each_submodules_own_mode():
    model = build("transformer", tiny(dropout=0.3)).train()
    model.decoder.layers[0].eval()  # a mixed state, set by the user
    modes = {name: m.training for name, m in model.named_modules()}
    greedy(model, inputs_of("transformer"), max_new_tokens=4)
    assert {name: m.training for name, m in model.named_modules()} == modes


@pytest.mark.parametrize(
    "decode", [greedy, beam4, sample_seeded], ids=["greedy", "beam4", "sample"]
)
def test_generated_ids_can_feed_a_training_step(decode: Callable):
    """Outputs are ordinary tensors (not inference-mode tensors): usable under autograd."""
    model = build("lm")
    out = decode(model, [[1, 5, 6]], max_new_tokens=4)
    loss = model(out.sequences).logsumexp(-1).mean()
    loss.backward()
    assert model.lm_head.weight.grad is not None


@pytest.mark.parametrize("decode", [greedy, beam4], ids=["greedy", "beam4"])
def test_source_padding_anywhere_decodes_as_the_sentence_alone(decode: Callable):
    """Sources are packed real-tokens-first, so a left- or middle-padded source row encodes at
    the positions it has alone."""
    model = build("transformer")
    row = [5, 6, 7, 8]
    alone = decode(model, [row], max_new_tokens=8)
    padded = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 0, 7, 0, 8], [5, 6, 7, 8, 0, 0]])
    out = decode(model, padded, max_new_tokens=8)
    for i in range(3):
        assert out.tolist()[i] == alone.tolist()[0]
        assert abs(float(out.scores[i]) - float(alone.scores[0])) <= 1e-5


# -- bad input -----------------------------------------------------------------------------------


@functools.cache
def _t() -> Transformer:
    return build("transformer", tiny(num_encoder_layers=1, num_decoder_layers=1))


@functools.cache
def _lm() -> TransformerLM:
    return build("lm", tiny(num_decoder_layers=1))


_SRC = torch.tensor([[5, 6, 7], [8, 9, PAD]])

CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    (
        "src-row-of-pads",
        lambda: greedy_search(_t(), torch.tensor([[5, 6], [PAD, PAD]])),
        ValueError,
        r"^src_ids: row 1 is empty \(only pad_id=0\)",
    ),
    ("src-empty-list", lambda: greedy_search(_t(), []), ValueError, r"^src_ids: empty batch"),
    (
        "src-list-with-empty-row",
        lambda: beam_search(_t(), [[5, 6], []]),
        ValueError,
        r"^src_ids: row 1 is empty",
    ),
    (
        "src-zero-width",
        lambda: greedy_search(_t(), torch.zeros(2, 0, dtype=torch.long)),
        ValueError,
        r"^src_ids: empty batch or sequence, shape \(2, 0\)",
    ),
    (
        "lm-prompt-of-pads",
        lambda: sample(_lm(), torch.tensor([[PAD, PAD], [5, 6]])),
        ValueError,
        r"^ids: row 0 is empty \(only pad_id=0\)",
    ),
    ("lm-empty-list", lambda: greedy_search(_lm(), []), ValueError, r"^ids: empty batch"),
    (
        "beam_size-zero",
        lambda: beam_search(_t(), _SRC, beam_size=0),
        ValueError,
        r"^beam_size: expected a positive int, got 0",
    ),
    (
        "beam_size-negative",
        lambda: beam_search(_t(), _SRC, beam_size=-1),
        ValueError,
        r"^beam_size: expected a positive int, got -1",
    ),
    (
        "beam_size-float",
        lambda: beam_search(_t(), _SRC, beam_size=1.5),
        ValueError,
        r"^beam_size: expected a positive int, got 1\.5",
    ),
    (
        "beam_size-bool",
        lambda: beam_search(_t(), _SRC, beam_size=True),
        ValueError,
        r"^beam_size: expected a positive int, got True",
    ),
    (
        "alpha-negative",
        lambda: beam_search(_t(), _SRC, alpha=-0.5),
        ValueError,
        r"^alpha: expected a finite number >= 0, got -0\.5",
    ),
    (
        "greedy-max_new_tokens-zero",
        lambda: greedy_search(_t(), _SRC, max_new_tokens=0),
        ValueError,
        r"^max_new_tokens: expected a positive int or None, got 0",
    ),
    (
        "beam-max_new_tokens-negative",
        lambda: beam_search(_lm(), PROMPTS, max_new_tokens=-3),
        ValueError,
        r"^max_new_tokens: expected a positive int or None, got -3",
    ),
    (
        "sample-max_new_tokens-zero",
        lambda: sample(_lm(), PROMPTS, max_new_tokens=0),
        ValueError,
        r"^max_new_tokens: expected a positive int or None, got 0",
    ),
    (
        "top_p-zero",
        lambda: sample(_t(), _SRC, top_p=0),
        ValueError,
        r"^top_p: expected a number in \(0, 1\] or None, got 0",
    ),
    (
        "top_p-above-one",
        lambda: sample(_t(), _SRC, top_p=1.5),
        ValueError,
        r"^top_p: expected a number in \(0, 1\] or None, got 1\.5",
    ),
    (
        "top_p-negative",
        lambda: sample(_t(), _SRC, top_p=-0.1),
        ValueError,
        r"^top_p: expected a number in \(0, 1\] or None, got -0\.1",
    ),
    (
        "temperature-zero",
        lambda: sample(_t(), _SRC, temperature=0),
        ValueError,
        r"^temperature: expected a positive number, got 0",
    ),
    (
        "temperature-negative",
        lambda: sample(_lm(), PROMPTS, temperature=-1),
        ValueError,
        r"^temperature: expected a positive number, got -1",
    ),
    (
        "top_k-zero",
        lambda: sample(_t(), _SRC, top_k=0),
        ValueError,
        r"^top_k: expected a positive int or None, got 0",
    ),
    (
        "generator-not-a-generator",
        lambda: sample(_t(), _SRC, generator=3),
        TypeError,
        r"^generator: expected a torch\.Generator, got int",
    ),
    (
        "greedy-min-exceeds-max",
        lambda: greedy_search(_t(), _SRC, max_new_tokens=2, min_new_tokens=3),
        ValueError,
        r"^min_new_tokens: 3 exceeds max_new_tokens=2",
    ),
    (
        "beam-min-exceeds-max",
        lambda: beam_search(_lm(), PROMPTS, max_new_tokens=2, min_new_tokens=3),
        ValueError,
        r"^min_new_tokens: 3 exceeds max_new_tokens=2",
    ),
    (
        "min_new_tokens-negative",
        lambda: greedy_search(_t(), _SRC, min_new_tokens=-1),
        ValueError,
        r"^min_new_tokens: expected an int >= 0, got -1",
    ),
    (
        "src-float-ids",
        lambda: greedy_search(_t(), _SRC.float()),
        TypeError,
        r"^src_ids: expected an integer dtype, got torch\.float32",
    ),
    (
        "lm-float-ids",
        lambda: beam_search(_lm(), right_padded(PROMPTS).double()),
        TypeError,
        r"^ids: expected an integer dtype, got torch\.float64",
    ),
    (
        "list-with-float-ids",
        lambda: greedy_search(_t(), [[5, 6.0]]),
        TypeError,
        r"^src_ids: row 0 holds something other than int ids",
    ),
    (
        "src-1d-tensor",
        lambda: greedy_search(_t(), _SRC[0]),
        ValueError,
        r"^src_ids: expected a \(B, T\) batch, got shape \(3,\); use ids\[None\]",
    ),
    (
        "lm-3d-tensor",
        lambda: greedy_search(_lm(), _SRC[None]),
        ValueError,
        r"^ids: expected shape \(B, T\), got \(1, 2, 3\)",
    ),
    (
        "inputs-a-string",
        lambda: greedy_search(_t(), "5 6 7"),
        TypeError,
        r"^src_ids: expected a \(B, T\) integer tensor or a list of id lists, got str",
    ),
    (
        "model-an-encoder",
        lambda: greedy_search(TransformerEncoder(tiny(num_encoder_layers=1)), _SRC),
        TypeError,
        r"^model: expected an attnlab Transformer or TransformerLM, got TransformerEncoder",
    ),
    (
        "model-a-torch-module",
        lambda: beam_search(torch.nn.Linear(2, 2), _SRC),
        TypeError,
        r"^model: expected an attnlab Transformer or TransformerLM, got Linear",
    ),
    (
        "src-id-past-vocab",
        lambda: greedy_search(_t(), torch.tensor([[5, 1000]])),
        ValueError,
        r"^src_ids: token id 1000 is outside the vocabulary \[0, 1000\)",
    ),
    (
        "src-negative-id",
        lambda: beam_search(_t(), [[5, -1]]),
        ValueError,
        r"^src_ids: token id -1 is outside the vocabulary \[0, 1000\)",
    ),
    (
        "lm-id-past-vocab",
        lambda: sample(_lm(), [[5, 6], [7, 1234]]),
        ValueError,
        r"^ids: token id 1234 is outside the vocabulary \[0, 1000\)",
    ),
    (
        "lm-prompt-past-learned-max_len",
        lambda: greedy_search(
            build("lm", tiny(num_decoder_layers=1, positional="learned", max_len=8)),
            [list(range(3, 12))],
        ),
        ValueError,
        r"^ids: a prompt of 9 tokens exceeds the model's max_len=8",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_naming_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert type(info.value) is exc


def test_bad_input_leaves_the_model_mode_alone():
    model = build("transformer", tiny(num_encoder_layers=1, num_decoder_layers=1)).train()
    with pytest.raises(ValueError, match=r"^src_ids: token id 1000"):
        greedy_search(model, [[5, 1000]])
    assert model.training


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
