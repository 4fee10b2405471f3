"""Guided decoding (attnlab.decode.constraints): lexically constrained beam search, forced prefixes
and per-token scores, on random models (fast decoder step and the readable reference).

What is checked, as the issue asked:
* every phrase appears, contiguous and in order, in every constrained output (n-best rows too),
  and the output is a valid hypothesis of the model: each token's reported log-probability
  equals the teacher-forced one (1e-5), and so does their sum;
* with no constraints the output is today's beam search, token for token and score for score;
* a forced prefix starts the output, and greedy search continues it exactly as a greedy loop
  that recomputes the whole decoder at each step (no cache) from that prefix;
* requests no output can meet are refused naming the input and the phrase;
* the pieces: the KMP progress of a phrase (a failed partial match falls back, never misses an
  occurrence), and the round-robin bank allocation of Post & Vilar (2018), against closed forms.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from _helpers import EOS, tiny
from attnlab import Transformer, beam_search, greedy_search, sample
from attnlab.decode.constraints import Guide, GuideError, Phrase, allocate

ATOL = 1e-5
SOURCES = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15]]


def model(seed: int = 1, eos_scale: float = 2.5) -> Transformer:
    """A random tiny Transformer whose EOS row is scaled up, so that outputs end at different
    lengths (as tests/decode/test_search.py does)."""
    torch.manual_seed(seed)
    m = Transformer(tiny(tie_output=False)).eval()
    with torch.no_grad():
        m.lm_head.weight[EOS] *= eos_scale
    return m


def contains(row: list[int], phrase: list[int]) -> bool:
    return any(row[j : j + len(phrase)] == phrase for j in range(len(row) - len(phrase) + 1))


def teacher_forced(m: Transformer, source: list[int], output: list[int]) -> torch.Tensor:
    """Each token's log-probability under ``m`` given the source and the tokens before it."""
    bos = m.config.bos_id
    with torch.no_grad():
        logits = m(torch.tensor([source]), torch.tensor([[bos, *output[:-1]]]))
    return F.log_softmax(logits[0].float(), dim=-1).gather(1, torch.tensor(output)[:, None])[:, 0]


CONSTRAINTS = [[[20, 21]], [[30], [31, 32]], [[7, 7, 8]]]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("beam", [2, 4])
def test_every_phrase_appears_and_the_scores_are_the_models(fast: bool, seed: int, beam: int):
    m = model(seed)
    constraints = [c[:beam] for c in CONSTRAINTS]
    found = beam_search(m, SOURCES, beam_size=beam, constraints=constraints, n_best=2, fast=fast)
    rows = found.tolist(keep_eos=True)
    for r, row in enumerate(rows):
        if not row:  # n-best past what the beam finished: score -inf
            assert math.isinf(float(found.scores[r]))
            continue
        source, phrases = SOURCES[r // 2], constraints[r // 2]
        for phrase in phrases:
            assert contains(row, phrase), (r, row, phrase)
        expected = teacher_forced(m, source, row)
        reported = found.token_log_probs[r, : len(row)]
        torch.testing.assert_close(reported, expected, atol=ATOL, rtol=0)
        assert abs(float(found.log_probs[r]) - float(expected.sum())) < ATOL * len(row)
        penalty = ((5 + len(row)) / 6) ** 0.6
        assert float(found.scores[r]) == pytest.approx(float(found.log_probs[r]) / penalty)
    assert all(rows[2 * i] for i in range(len(SOURCES)))  # every input has its best


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("seed", [1, 4])
def test_no_constraints_is_todays_beam_search(fast: bool, seed: int):
    m = model(seed)
    for beam, n in ((1, 1), (4, 1), (4, 3)):
        plain = beam_search(m, SOURCES, beam_size=beam, n_best=n, fast=fast)
        for empty in ([[], [], []], None):
            guided = beam_search(
                m, SOURCES, beam_size=beam, n_best=n, fast=fast, constraints=empty, prefixes=None
            )
            assert guided.tolist(keep_eos=True) == plain.tolist(keep_eos=True)
            assert torch.equal(guided.scores, plain.scores)
            assert torch.equal(guided.token_log_probs, plain.token_log_probs)
        prefixed = beam_search(m, SOURCES, beam_size=beam, n_best=n, fast=fast, prefixes=[[]] * 3)
        assert prefixed.tolist(keep_eos=True) == plain.tolist(keep_eos=True)


def test_a_constrained_batch_decodes_each_sentence_as_alone():
    m = model(2)
    batch = beam_search(m, SOURCES, beam_size=4, constraints=CONSTRAINTS)
    for i, source in enumerate(SOURCES):
        alone = beam_search(m, [source], beam_size=4, constraints=[CONSTRAINTS[i]])
        assert batch.tolist()[i] == alone.tolist()[0]
        torch.testing.assert_close(batch.scores[i], alone.scores[0], atol=ATOL, rtol=0)


def test_a_constraint_the_model_avoids_is_placed_all_the_same():
    """Token 25's output row scaled far down: the model never picks it unconstrained, and a
    constrained search still places it (the banks keep the hypotheses that have)."""
    m = model(1)
    with torch.no_grad():
        m.lm_head.weight[25] *= -8.0
    plain = beam_search(m, SOURCES, beam_size=4).tolist()
    assert not any(25 in row for row in plain)
    found = beam_search(m, SOURCES, beam_size=4, constraints=[[[25]], [[25, 25]], [[25], [26]]])
    for row, phrases in zip(found.tolist(), [[[25]], [[25, 25]], [[25], [26]]], strict=True):
        assert all(contains(row, p) for p in phrases), row


def test_a_phrase_with_alternatives_is_met_by_either():
    m = model(3)
    phrase = Phrase(((40, 41), (42,)), "word")
    found = beam_search(m, SOURCES, beam_size=3, constraints=[[phrase]] * 3).tolist()
    for row in found:
        assert contains(row, [40, 41]) or contains(row, [42]), row


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_phrases_that_share_a_spelling_are_met_by_one_occurrence(fast: bool):
    """A phrase given twice, and two phrases with an alternative in common: each is met (one
    occurrence holds both). Found by the explorer's fuzzer: the second copy took the first's
    automaton, so the first phrase could never be met and the search ended with nothing."""
    m = model(2)
    shared = [Phrase(((40, 41), (42,)), "a"), Phrase(((42,), (43, 44)), "b")]
    asked = [[[20, 21], [20, 21]], shared, [[7, 8], [9], [7, 8]]]
    found = beam_search(m, SOURCES, beam_size=4, constraints=asked, fast=fast)
    assert all(math.isfinite(float(s)) for s in found.scores)  # each input found its best
    for row, phrases in zip(found.tolist(), asked, strict=True):
        for phrase in phrases:
            spellings = phrase.alternatives if isinstance(phrase, Phrase) else [phrase]
            assert any(contains(row, list(a)) for a in spellings), (row, phrase)
    guide = _guide([[20, 21], [20, 21]])
    _, met = _walk(guide, [5, 20, 21])
    assert met == [False, False, True]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_a_prefix_is_continued_as_greedy_search_from_it(fast: bool):
    m = model(2)
    prefixes = [[30, 31], [], [9]]
    found = greedy_search(m, SOURCES, prefixes=prefixes, fast=fast, max_new_tokens=12)
    bos = m.config.bos_id
    for source, prefix, row in zip(SOURCES, prefixes, found.tolist(keep_eos=True), strict=True):
        assert row[: len(prefix)] == prefix
        # The reference: the whole decoder recomputed at each step, no cache.
        out = list(prefix)
        with torch.no_grad():
            while len(out) < 12 and (not out or out[-1] != EOS or len(out) <= len(prefix)):
                logits = m(torch.tensor([source]), torch.tensor([[bos, *out]]))[0, -1]
                logits[[m.config.pad_id, bos]] = -math.inf
                out.append(int(logits.argmax()))
                if out[-1] == EOS:
                    break
        assert row == out, (row, out)
        expected = teacher_forced(m, source, row)
        torch.testing.assert_close(found.token_log_probs[SOURCES.index(source), : len(row)],
                                   expected, atol=ATOL, rtol=0)  # fmt: skip


def test_a_prefix_starts_beam_search_and_sampling_outputs():
    m = model(1)
    prefixes = [[30, 31, 32], [50], [9, 9]]
    for found in (
        beam_search(m, SOURCES, beam_size=4, prefixes=prefixes, n_best=2),
        beam_search(m, SOURCES, beam_size=4, prefixes=prefixes, constraints=[[[60]]] * 3),
        sample(m, SOURCES, prefixes=prefixes, generator=torch.Generator().manual_seed(0)),
    ):
        rows = found.tolist(keep_eos=True)
        step = len(rows) // len(SOURCES)
        for r, row in enumerate(rows):
            if row:
                assert row[: len(prefixes[r // step])] == prefixes[r // step], row


@pytest.mark.parametrize(
    ("prefixes", "constraints", "beam", "limit", "message"),
    [
        (None, [[[20]], [[]], [[5]]], 4, None, "input 1: phrase '[]': empty phrase"),
        (None, [[[20]], [[5, EOS]], [[5]]], 4, None, "input 1: phrase '[5, 2]': holds id 2"),
        (None, [[[20]], [[5]], [[5], [6], [7]]], 2, None, "input 2: 3 phrases, but a beam of 2"),
        (None, [[[20] * 6], [], []], 4, 5, "input 0: the phrases need up to 6 tokens"),
        ([[1, 2], [], []], None, 4, None, "input 0: the prefix holds id 1"),
        ([[3] * 4, [], []], [[[20, 21]], [], []], 4, 5, "input 0: the prefix and the phrases"),
    ],
)
def test_impossible_requests_are_refused_naming_the_input_and_phrase(
    prefixes, constraints, beam, limit, message
):
    m = model(1)
    with pytest.raises(GuideError) as caught:
        beam_search(
            m,
            SOURCES,
            beam_size=beam,
            max_new_tokens=limit,
            prefixes=prefixes,
            constraints=constraints,
        )
    assert str(caught.value).startswith(message), str(caught.value)


def test_bad_argument_types_fail_naming_the_argument():
    m = model(1)
    with pytest.raises(TypeError, match=r"constraints\[0\]\[0\]"):
        beam_search(m, SOURCES, constraints=[["word"], [], []])
    with pytest.raises(ValueError, match="constraints: 1 rows for 3 inputs"):
        beam_search(m, SOURCES, constraints=[[[5]]])
    with pytest.raises(ValueError, match="prefixes: 2 rows for 3 inputs"):
        greedy_search(m, SOURCES, prefixes=[[5], [6]])


# -- the pieces --------------------------------------------------------------------------------


def _walk(guide: Guide, tokens: list[int]) -> tuple[list[list[int]], list[bool]]:
    """Feed ``tokens`` to one hypothesis of a one-input guide: its KMP states and "all met"
    after each token."""
    guide.start(1)
    states, met = [], []
    inputs = torch.tensor([0])
    for token in tokens:
        kmp, groups, just = guide.advance(
            inputs, torch.tensor([[0]]), torch.tensor([[token]]), len(states) + 1
        )
        guide.update(kmp, groups, just, torch.tensor([[0]]))
        states.append(guide.kmp[0, 0].tolist())
        met.append(bool(guide.met.all()))
    return states, met


def _guide(phrases: list) -> Guide:
    return Guide(None, [phrases], beam=4, limit=torch.tensor([50]), eos_id=EOS, banned=[0, 1])


def test_a_failed_partial_match_falls_back_and_finds_the_phrase():
    # 7 7 7 8 holds 7 7 8: after 7 7, a third 7 fails to continue but "7 7" is still a prefix.
    states, met = _walk(_guide([[7, 7, 8]]), [7, 7, 7, 8])
    assert [s[0] for s in states] == [1, 2, 2, 0]  # met at the end: the state resets to 0
    assert met == [False, False, False, True]
    # a b a b c: "a b a" fails on "b"... the KMP fallback keeps "a b"
    _, met = _walk(_guide([[3, 4, 3, 5]]), [3, 4, 3, 4, 3, 5])
    assert met[-1] and not any(met[:-1])


def test_two_phrases_in_either_order_and_banks():
    guide = _guide([[10, 11], [12]])
    _, met = _walk(guide, [12, 9, 10, 11])
    assert met == [False, False, False, True]
    guide.start(1)
    inputs, origin = torch.tensor([0]), torch.tensor([[0, 0, 0]])
    kmp, groups, _ = guide.advance(inputs, origin, torch.tensor([[10, 12, 9]]), 1)
    # bank: the longest alternative of each met phrase plus the best partial match
    assert guide.bank(inputs, kmp, groups).tolist() == [[1, 1, 0]]


def test_allocate_is_round_robin_over_banks_highest_first():
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -math.inf]])
    bank = torch.tensor([[0, 0, 1, 1, 2, 0, 2]])
    # best of bank 2 (-5), of bank 1 (-3), of bank 0 (-1), then the second bests: 1 (-4), 0 (-2)
    assert allocate(scores, bank, 5).tolist() == [[4, 2, 0, 3, 1]]
    assert allocate(scores, bank, 2).tolist() == [[4, 2]]
    # one bank: the k best by score, as the ordinary beam
    assert allocate(scores, torch.zeros_like(bank), 3).tolist() == [[0, 1, 2]]


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_where_an_alternative_may_match_and_whole_word_ends(seed: int):
    """A word spelled without its leading space (the "start" alternative) only at the output's
    start, with it ("inside") anywhere else; and after a completed phrase no token that
    continues a word (here ids 100-199, standing in for subwords without a leading space)."""
    m = model(seed)
    with torch.no_grad():  # make the glued spelling and word continuations attractive
        m.lm_head.weight[40] *= 3.0
        m.lm_head.weight[100:200] *= 2.0
    phrase = Phrase(((40, 41), (42, 43)), "word", ("start", "inside"))
    continuations = torch.zeros(m.config.vocab_size, dtype=torch.bool)
    continuations[100:200] = True
    prefixes = [[], [7], []]
    found = beam_search(m, SOURCES, beam_size=4, n_best=3, constraints=[[phrase]] * 3,
                        prefixes=prefixes, continuations=continuations)  # fmt: skip
    for r, row in enumerate(found.tolist(keep_eos=True)):
        if not row:
            continue
        starts = [j for j in range(1, len(row) - 1) if row[j : j + 2] == [42, 43]]
        at_start = row[:2] == [40, 41]
        assert at_start or starts, row
        if prefixes[r // 3]:
            assert not at_start  # after a prefix the phrase is inside the output
        ends = ([2] if at_start else []) + [j + 2 for j in starts]
        assert any(j == len(row) or not 100 <= row[j] < 200 for j in ends), row


def test_constraints_and_prefixes_hold_with_int8_weights():
    """The int8 decoder step (quantize="int8") runs the same guided search: every phrase in
    every output, the prefix first (int8 changes the scores, not the guarantees)."""
    m = model(2)
    prefixes = [[30], [], [9, 9]]
    found = beam_search(m, SOURCES, beam_size=4, quantize="int8", constraints=CONSTRAINTS,
                        prefixes=prefixes)  # fmt: skip
    for row, phrases, prefix in zip(found.tolist(), CONSTRAINTS, prefixes, strict=True):
        assert row[: len(prefix)] == prefix
        assert all(contains(row, p) for p in phrases), row
