"""The fast decoder step (attnlab.decode.fast) against the readable reference.

The reference is ``Transformer.decode`` with a ``DecoderCache``. On random models of every
configuration the fast step supports (positional kinds, pre-/post-LN, grouped-query attention,
GELU without biases, an embedding LayerNorm, separate vocabularies), fed the same ids over
padded batches:

* each step's logits agree within ``ATOL``, and so do the self-attention keys and values each
  row has cached (the fast store is laid out differently; ``FastDecoder.cache_keys`` gives each
  row's history in the reference's layout);
* with beams the reference reorders its cache after each step and the fast decoder reorders
  only its ancestry mask: after random reorders and after sentences leave, both still agree;
* greedy search, beam search and sampling give identical outputs on both paths (hypothesis
  draws the batch shapes, beams and head layouts).

Tolerance: 1e-5 absolute on logits (float32; the two paths sum in different orders: folded
score scale, ``bmm`` instead of SDPA, pre-transposed weights), log-probabilities of whole
outputs as tests/decode/test_search.py (1e-5 plus 1e-6 relative).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from _helpers import tiny
from attnlab import (
    Transformer,
    TransformerLM,
    beam_search,
    greedy_search,
    sample,
)
from attnlab.decode.fast import FastDecoder, pack, why_not_fast_path
from attnlab.decode.options import DecodingOptions
from attnlab.decode.session import SINGLE_THREAD_ROWS

ATOL = 1e-5
PAD, BOS = 0, 1
CONFIGS = {
    "paper": {},
    "pre-ln": {"norm_first": True},
    "learned": {"positional": "learned"},
    "rotary": {"positional": "rotary"},
    "alibi": {"positional": "alibi"},
    "none": {"positional": "none"},
    "gqa": {"num_kv_heads": 2},
    "mqa-gelu-no-bias": {"num_kv_heads": 1, "activation": "gelu_tanh", "bias": False},
    "embedding-norm-untied": {
        "embedding_norm": True,
        "tie_output": False,
        "share_embeddings": False,
        "tgt_vocab_size": 700,
        "scale_embeddings": False,
    },
}


pytestmark = pytest.mark.usefixtures("one_thread")


def model_of(name: str, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny(**CONFIGS[name])).eval()


def padded_sources(batch: int = 4, length: int = 9, seed: int = 0) -> Tensor:
    """Right-padded random sources; row 1 and row 3 (when present) end in pads."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 700, (batch, length), generator=gen)
    if batch > 1:
        src[1, length // 2 :] = PAD
    if batch > 3:
        src[3, 2:] = PAD
    return src


def near(a: Tensor, b: Tensor) -> bool:
    return torch.allclose(a, b, atol=ATOL, rtol=0.0)


def start(model: Transformer, src: Tensor, beam: int, capacity: int):
    """The reference cache and the fast decoder for ``src``, ``beam`` rows per source."""
    memory = model.encode(src)
    mask = model.source_mask(src)
    cache = model.new_cache(memory, mask, capacity=capacity)
    if beam > 1:
        cache.select(torch.arange(src.shape[0]).repeat_interleave(beam))
    fast = FastDecoder(model, memory, mask, beam=beam, capacity=capacity)
    return cache, fast


def check_caches(cache, fast: FastDecoder) -> None:
    for layer, reference in enumerate(cache.self_attn):
        keys, values = fast.cache_keys(layer)
        assert near(keys, reference.k) and near(values, reference.v), layer


# -- the step: logits and caches -------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_greedy_steps_equal_the_reference(name: str):
    model = model_of(name)
    src = padded_sources()
    cache, fast = start(model, src, beam=1, capacity=8)
    gen = torch.Generator().manual_seed(1)
    ids = torch.full((src.shape[0],), BOS)
    for _ in range(8):
        expected = model.decode(ids[:, None], cache=cache)[:, -1]
        actual = fast.step(ids)
        assert actual.shape == expected.shape
        assert near(actual, expected), (actual - expected).abs().max()
        ids = torch.randint(3, 700, ids.shape, generator=gen)  # any next ids
    check_caches(cache, fast)


@pytest.mark.parametrize("name", ["paper", "rotary", "gqa"])
@torch.no_grad()
def test_beam_steps_equal_the_reference_after_reorders_and_pruning(name: str):
    """The reference reorders its cache rows; the fast decoder only its ancestry mask."""
    model = model_of(name)
    beam, src = 3, padded_sources(batch=4)
    cache, fast = start(model, src, beam=beam, capacity=7)
    gen = torch.Generator().manual_seed(2)
    sentences = 4
    ids = torch.full((sentences * beam,), BOS)
    for step in range(7):
        expected = model.decode(ids[:, None], cache=cache)[:, -1]
        assert near(fast.step(ids), expected), step
        keep = torch.arange(sentences)
        if step in (2, 4):  # a sentence leaves: the first, then the last
            check_caches(cache, fast)
            keep = keep[1:] if step == 2 else keep[:-1]
        origin = torch.randint(0, beam, (keep.shape[0], beam), generator=gen)
        rows = (keep[:, None] * beam + origin).reshape(-1)
        pruned = keep.shape[0] < sentences
        cache.select(rows, cross=pruned)
        fast.select(rows, cross=pruned)
        sentences = keep.shape[0]
        ids = torch.randint(3, 700, (sentences * beam,), generator=gen)
    check_caches(cache, fast)


@torch.no_grad()
def test_greedy_pruning_keeps_any_subset_of_rows():
    model = model_of("paper")
    src = padded_sources(batch=5)
    cache, fast = start(model, src, beam=1, capacity=6)
    ids = torch.full((5,), BOS)
    for step, keep in enumerate([[0, 1, 2, 3, 4], [0, 2, 3, 4], [1, 3], [1]]):  # of the rows left
        keep = torch.tensor(keep)
        if step:
            cache.select(keep)
            fast.select(keep)
        ids = ids[keep] if step else ids
        assert near(fast.step(ids), model.decode(ids[:, None], cache=cache)[:, -1])
        ids = ids + 1
    check_caches(cache, fast)


@torch.no_grad()
def test_packed_weights_follow_parameter_changes():
    model = model_of("paper")
    src = padded_sources(batch=2)
    first = pack(model)
    assert pack(model) is first  # cached while nothing changes
    with torch.no_grad():
        model.decoder.layers[0].ff.linear1.weight.mul_(1.5)  # in place: a new version
    assert pack(model) is not first
    cache, fast = start(model, src, beam=1, capacity=3)
    ids = torch.full((2,), BOS)
    assert near(fast.step(ids), model.decode(ids[:, None], cache=cache)[:, -1])


# -- whole searches: identical outputs -------------------------------------------------------


def same(a, b) -> None:
    assert a.tolist() == b.tolist()
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.finished, b.finished)
    tolerance = ATOL + 1e-6 * a.log_probs.abs()
    assert ((a.log_probs - b.log_probs).abs() <= tolerance).all()
    assert ((a.scores - b.scores).abs() <= ATOL + 1e-6 * a.scores.abs()).all()


def eos_likely(name: str) -> Transformer:
    """An untied model whose EOS logit is scaled up, so that rows end at different steps."""
    torch.manual_seed(0)
    model = Transformer(tiny(**CONFIGS[name], tie_output=False)).eval()
    with torch.no_grad():
        model.lm_head.weight[2] *= 6.0
    return model


SEARCH_CASES = [(name, False) for name in CONFIGS] + [
    (name, True) for name in ("paper", "pre-ln", "alibi", "gqa")
]


@pytest.mark.parametrize(("name", "eos"), SEARCH_CASES)
def test_searches_give_the_reference_outputs(name: str, eos: bool):
    model = eos_likely(name) if eos else model_of(name)
    src = padded_sources(batch=4, length=7)
    kw = {"max_new_tokens": 9}
    same(greedy_search(model, src, **kw), greedy_search(model, src, fast=False, **kw))
    same(
        beam_search(model, src, beam_size=3, **kw),
        beam_search(model, src, beam_size=3, fast=False, **kw),
    )
    if name != "paper":
        return  # sampling draws from the same distributions: one configuration shows it
    draw = {"top_k": 50, "temperature": 0.8, **kw}
    fast = sample(model, src, generator=torch.Generator().manual_seed(3), **draw)
    reference = sample(model, src, generator=torch.Generator().manual_seed(3), fast=False, **draw)
    same(fast, reference)


@settings(max_examples=8, deadline=None)
@given(
    batch=st.integers(1, 5),
    length=st.integers(1, 7),
    beam=st.integers(1, 4),
    heads=st.sampled_from([(4, 4), (4, 2), (4, 1), (2, 2)]),
    seed=st.integers(0, 3),
)
def test_property_fast_and_reference_searches_agree(batch, length, beam, heads, seed):
    torch.manual_seed(seed)
    num_heads, kv = heads
    config = tiny(vocab_size=300, d_model=32, num_heads=num_heads, num_kv_heads=kv, d_ff=64)
    model = Transformer(config).eval()
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 300, (batch, length), generator=gen)
    cut = torch.randint(1, length + 1, (batch,), generator=gen)  # each row >= 1 real token
    src[torch.arange(length)[None, :] >= cut[:, None]] = PAD
    kw = {"max_new_tokens": 6, "beam_size": beam}
    same(beam_search(model, src, **kw), beam_search(model, src, fast=False, **kw))


# -- which models, and bad input -------------------------------------------------------------


def test_why_not_fast_path_names_the_reason():
    assert why_not_fast_path(model_of("paper")) == ""
    torch.manual_seed(0)
    lm = TransformerLM(tiny())
    assert "TransformerLM" in why_not_fast_path(lm)
    hooked = model_of("paper")
    hooked.decoder.layers[1].register_forward_hook(lambda *a: None)
    assert "hooks on decoder.layers.1" in why_not_fast_path(hooked)

    class Custom(Transformer):
        def decode(self, *args, **kwargs):
            return super().decode(*args, **kwargs)

    torch.manual_seed(0)
    assert "overrides decode" in why_not_fast_path(Custom(tiny()))
    double = model_of("paper").double()
    assert why_not_fast_path(double) == ""
    assert "float32" in why_not_fast_path(double, "int8")


def test_reference_path_still_serves_what_the_fast_one_cannot():
    hooked = model_of("paper")
    calls = []
    hooked.decoder.layers[0].register_forward_hook(lambda *a: calls.append(1))
    out = greedy_search(hooked, padded_sources(batch=2), max_new_tokens=3)
    assert len(out.tolist()) == 2 and calls  # the hook ran: the reference path decoded


def test_bad_quantize_and_fast_arguments_are_one_line_errors():
    model = model_of("paper")
    src = padded_sources(batch=1)
    with pytest.raises(ValueError, match=r"^quantize: expected one of int8 or None, got 'int4'$"):
        greedy_search(model, src, quantize="int4")
    with pytest.raises(ValueError, match=r"quantize='int8' runs on the fast decoder step only"):
        greedy_search(model, src, quantize="int8", fast=False)
    with pytest.raises(TypeError, match=r"^fast: expected a bool, got 'yes'$"):
        beam_search(model, src, fast="yes")
    with pytest.raises(ValueError, match="quantize='int8': needs a float32 model"):
        beam_search(model.double(), src, quantize="int8")


# -- int8 ------------------------------------------------------------------------------------


@torch.no_grad()
def test_int8_logits_stay_close_to_float32():
    """Dynamic int8 (per-channel weights, 7-bit activations) on a random model: logits within
    a few percent of their spread, and most greedy tokens unchanged."""
    model = model_of("paper")
    src = padded_sources(batch=4)
    memory, mask = model.encode(src), model.source_mask(src)
    exact = FastDecoder(model, memory, mask, beam=1, capacity=4)
    int8 = FastDecoder(model, memory, mask, beam=1, capacity=4, quantize="int8")
    ids = torch.full((4,), BOS)
    for _ in range(4):
        a, b = exact.step(ids), int8.step(ids)
        assert (a - b).abs().max() < 0.05 * (a.max() - a.min())
        ids = a.argmax(dim=-1)
    kw = {"max_new_tokens": 10}
    fp32 = greedy_search(model, src, **kw).tolist()
    q8 = greedy_search(model, src, quantize="int8", **kw).tolist()
    agree = sum(x == y for r, s in zip(fp32, q8, strict=True) for x, y in zip(r, s, strict=False))
    assert agree >= 0.8 * sum(map(len, fp32))


# -- threads -----------------------------------------------------------------------------------


def test_small_batches_decode_on_one_thread_and_restore_the_setting(monkeypatch):
    seen = []
    import attnlab.decode.fast as fd
    import attnlab.decode.session as decoding

    monkeypatch.setattr(decoding, "separate_cores", lambda: 1)  # two hyperthreads of one core

    real_step = fd.FastDecoder.step

    def spy(self, ids):
        seen.append(torch.get_num_threads())
        return real_step(self, ids)

    monkeypatch.setattr(fd.FastDecoder, "step", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = model_of("paper")
        greedy_search(model, padded_sources(batch=1), max_new_tokens=2)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        big = padded_sources(batch=SINGLE_THREAD_ROWS)
        greedy_search(model, big, max_new_tokens=2)
        assert set(seen) == {2}
        # On two separate cores a small batch keeps the caller's threads.
        monkeypatch.setattr(decoding, "separate_cores", lambda: 2)
        seen.clear()
        greedy_search(model, padded_sources(batch=1), max_new_tokens=2)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)


def _topology(root, cpus: dict[int, tuple[int, int]]) -> None:
    for cpu, (package, core) in cpus.items():
        where = root / f"cpu{cpu}" / "topology"
        where.mkdir(parents=True)
        (where / "physical_package_id").write_text(f"{package}\n")
        (where / "core_id").write_text(f"{core}\n")


def test_cores_are_counted_from_the_topology(tmp_path, monkeypatch):
    from attnlab.decode.session import count_cores

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    _topology(tmp_path / "two", {0: (0, 0), 1: (0, 1)})
    assert count_cores(tmp_path / "two") == 2
    _topology(tmp_path / "siblings", {0: (0, 3), 1: (0, 3)})  # hyperthreads of one core
    assert count_cores(tmp_path / "siblings") == 1
    _topology(tmp_path / "sockets", {0: (0, 0), 1: (1, 0)})  # core 0 of two packages
    assert count_cores(tmp_path / "sockets") == 2
    assert count_cores(tmp_path / "missing") == 1  # unreadable: one thread, as before


# -- int8 at the user's edges: the Python API and `attnlab translate --quantize` ------------


NUMBERS = ["seven", "three hundred and forty-two", "twelve", "five hundred and sixty-one"]


def test_translator_and_cli_translate_with_int8(numbers_model_dir, capsys):
    from attnlab.cli import main
    from attnlab.inference.translator import Translator

    exact = Translator.load(
        numbers_model_dir, device="cpu", decoding=DecodingOptions(beam_size=1)
    ).translate(NUMBERS)
    int8 = Translator.load(
        numbers_model_dir, device="cpu", decoding=DecodingOptions(beam_size=1), quantize="int8"
    )
    assert int8.quantize == "int8"
    quantized = int8.translate(NUMBERS)
    assert len(quantized) == len(NUMBERS) and all(isinstance(t, str) for t in quantized)
    assert sum(a == b for a, b in zip(exact, quantized, strict=True)) >= len(NUMBERS) // 2
    capsys.readouterr()  # the same sentences in one batch: int8 scales depend on the batch
    argv = [
        "translate",
        "--model",
        str(numbers_model_dir),
        "--beam-size",
        "1",
        "--quantize",
        "int8",
    ]
    argv += NUMBERS
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == quantized


def test_bad_quantize_is_one_line(numbers_model_dir, capsys):
    from attnlab.cli import main
    from attnlab.inference.translator import Translator

    with pytest.raises(ValueError, match=r"^quantize: expected one of int8 or None, got 'int4'$"):
        Translator.load(numbers_model_dir, device="cpu", quantize="int4")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", str(numbers_model_dir), "--quantize", "int4", "one"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--quantize: invalid choice: 'int4'" in err[-1]
