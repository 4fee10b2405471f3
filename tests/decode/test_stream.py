"""Greedy decoding of sentences that come and go (attnlab.decode.stream) against each sentence
decoded alone by the readable reference (``greedy_search(..., fast=False)``).

Sentences of random lengths join a running stream at random steps (several at once, into a
stream whose rows have ended and whose first slots were dropped), on random models of the
configurations the stream takes, and on a model whose EOS is likely, so that rows end at many
different steps: each sentence's ids, length and ended-with-EOS flag equal its reference's, and
its log-probabilities agree within the searches' tolerance (tests/decode/test_fast.py).
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _helpers import tiny
from attnlab import Transformer, greedy_search
from attnlab.decode.fast import FastDecoder
from attnlab.decode.session import output_limit
from attnlab.decode.stream import GreedyStream, why_not_stream

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-5
CONFIGS = {
    "paper": {},
    "pre-ln": {"norm_first": True},
    "learned": {"positional": "learned"},
    "none": {"positional": "none"},
    "gqa": {"num_kv_heads": 2},
}


def model_of(name: str, eos_boost: float = 1.0, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny(**CONFIGS[name], tie_output=False)).eval()
    with torch.no_grad():
        model.lm_head.weight[model.config.eos_id] *= eos_boost
    return model


def alone(model: Transformer, source: list[int], limit: int):
    found = greedy_search(model, [source], max_new_tokens=limit, fast=False)
    ids, tokens = found.tolist(keep_eos=True)[0], found.token_scores()[0]
    return ids, float(found.log_probs[0]), bool(found.finished[0]), tokens


def run(model: Transformer, arrivals: dict[int, list[list[int]]], limits: dict) -> dict:
    """Feed ``arrivals[step]`` before that step; every sentence's :class:`Finished`."""
    stream, out, step = GreedyStream(model), {}, 0
    pending = dict(arrivals)
    while pending or stream.rows:
        for source in pending.pop(step, []):
            key = tuple(source)
            stream.add([source], [limits[key]], [key])
        for found in stream.step():
            out[found.key] = found
        step += 1
    return out


def check(model: Transformer, arrivals: dict[int, list[list[int]]], limit_of) -> None:
    limits = {tuple(s): limit_of(s) for group in arrivals.values() for s in group}
    out = run(model, arrivals, limits)
    assert set(out) == set(limits)
    for key, found in out.items():
        ids, log_prob, finished, tokens = alone(model, list(key), limits[key])
        assert found.ids == ids, key
        assert found.finished == finished
        assert abs(found.log_prob - log_prob) <= ATOL + 1e-6 * abs(log_prob)
        assert found.token_log_probs == pytest.approx(tokens, abs=ATOL)


def sources(rng: random.Random, count: int) -> list[list[int]]:
    return [[rng.randrange(3, 700) for _ in range(rng.randint(1, 12))] for _ in range(count)]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("eos_boost", [1.0, 6.0])
def test_sentences_joining_at_any_step_decode_as_alone(name: str, eos_boost: float):
    model = model_of(name, eos_boost)
    rng = random.Random(name)
    arrivals = {0: sources(rng, 3), 1: sources(rng, 1), 4: sources(rng, 2), 9: sources(rng, 3)}
    arrivals[17] = sources(rng, 2)
    check(model, arrivals, lambda s: output_limit(len(s), None, model.config.max_len))


def test_short_limits_leave_rows_at_their_own_steps():
    """Rows reach their limits at different steps (no EOS): each leaves at its own."""
    model = model_of("paper")
    rng = random.Random(1)
    arrivals = {0: sources(rng, 4), 2: sources(rng, 4), 3: sources(rng, 1)}
    check(model, arrivals, lambda s: 1 + len(s) % 7)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from(["paper", "pre-ln", "learned"]))
def test_property_random_arrivals_decode_as_alone(seed: int, name: str):
    model = model_of(name, eos_boost=4.0)
    rng = random.Random(seed)
    arrivals: dict[int, list[list[int]]] = {}
    for _ in range(rng.randint(1, 5)):
        arrivals.setdefault(rng.randrange(0, 20), []).extend(sources(rng, rng.randint(1, 3)))
    check(model, arrivals, lambda s: rng.randint(1, 30))


def test_an_empty_stream_steps_to_nothing_and_starts_again():
    model = model_of("paper", eos_boost=6.0)
    stream = GreedyStream(model)
    assert stream.step() == [] and stream.rows == 0
    stream.add([[5, 6, 7]], [3], ["a"])
    found = []
    while stream.rows:
        found += stream.step()
    assert [f.key for f in found] == ["a"] and stream.decoder is None
    stream.add([[8, 9]], [4], ["b"])  # a new decoder after the last one emptied
    while stream.rows:
        found += stream.step()
    assert [f.key for f in found] == ["a", "b"]
    assert found[1].ids == alone(model, [8, 9], 4)[0]


def test_what_cannot_stream_is_refused_with_its_reason():
    for positional in ("rotary", "alibi"):
        torch.manual_seed(0)
        model = Transformer(tiny(positional=positional)).eval()
        assert positional in why_not_stream(model)
        with pytest.raises(ValueError, match="cannot decode as a stream"):
            GreedyStream(model)
    assert "Transformer" in why_not_stream(object())
    model = model_of("paper")
    stream = GreedyStream(model)
    with pytest.raises(ValueError, match="one of each"):
        stream.add([[5]], [1, 2], ["a"])
    with pytest.raises(ValueError, match="limits"):
        stream.add([[5]], [0], ["a"])
    learned = model_of("learned")
    with pytest.raises(ValueError, match="max_len"):
        GreedyStream(learned).add([[5]], [learned.config.max_len + 1], ["a"])


def test_join_refuses_beams_and_a_batch_that_started():
    model = model_of("paper")
    memory = model.encode(torch.tensor([[5, 6]]))
    first = FastDecoder(model, memory, None, beam=1, capacity=4)
    beams = FastDecoder(model, memory, None, beam=2, capacity=4)
    with pytest.raises(ValueError, match="beams"):
        first.join(beams)
    started = FastDecoder(model, memory, None, beam=1, capacity=4)
    started.step(torch.tensor([1]))
    with pytest.raises(ValueError, match="no step taken"):
        first.join(started)
