"""Incremental decoding: KVCache, cached MultiHeadAttention, DecoderCache and the models' cached
decode give the numbers of a full recomputation.

The main property: decoding one token (or a few) at a time on a cache gives, at every step, the
logits of running the model on the whole prefix, for the encoder-decoder and the language model
and for every positional-encoding kind. Tolerance 1e-5 absolute (float32); exact where the
cache only moves bits around (append, growth, select).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from _helpers import left_padded, tiny, token_ids
from attnlab import (
    ALiBi,
    DecoderCache,
    KVCache,
    MultiHeadAttention,
    RotaryEmbedding,
    Transformer,
    TransformerConfig,
    TransformerLM,
    key_mask,
)

ATOL = 1e-5
PAD, BOS = 0, 1
POSITIONAL_KINDS = ["sinusoidal", "learned", "rotary", "alibi", "none"]
# Every positional kind, then pre-LN and grouped-/multi-query variants of some.
MODEL_VARIANTS = [{"positional": kind} for kind in POSITIONAL_KINDS] + [
    {"positional": "rotary", "norm_first": True},
    {"positional": "alibi", "num_kv_heads": 2},
    {"positional": "learned", "norm_first": True, "num_kv_heads": 2},
    {"positional": "sinusoidal", "num_kv_heads": 1},
]
VARIANT_IDS = ["-".join(f"{k}={v}" for k, v in d.items()) for d in MODEL_VARIANTS]


# -- helpers ---------------------------------------------------------------------------------


def build(cls: type, config: TransformerConfig, seed: int = 0):
    torch.manual_seed(seed)
    return cls(config).eval()


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def close(actual: Tensor, expected: Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def kv(batch: int = 2, heads: int = 2, t: int = 3, dim: int = 4, seed: int = 0):
    return randn(batch, heads, t, dim, seed=seed), randn(batch, heads, t, dim, seed=seed + 100)


# -- KVCache ---------------------------------------------------------------------------------


def test_kvcache_append_writes_in_place_into_preallocated_buffers():
    cache = KVCache(capacity=8)
    assert cache.keys is None and cache.k is None and cache.v is None
    assert cache.length == 0 and cache.capacity == 8 and cache.batch_size is None
    k1, v1 = kv(t=3, seed=1)
    keys, values = cache.append(k1, v1)
    assert cache.keys.shape == (2, 2, 8, 4) and cache.values.shape == (2, 2, 8, 4)
    assert cache.length == 3 and cache.batch_size == 2 and cache.capacity == 8
    key_ptr, value_ptr = cache.keys.data_ptr(), cache.values.data_ptr()
    assert torch.equal(keys, k1) and torch.equal(values, v1)
    # the returned tensors are views of the buffers, not copies
    assert keys.data_ptr() == key_ptr and values.data_ptr() == value_ptr

    k2, v2 = kv(t=1, seed=2)
    cache.append(k2, v2)
    k3, v3 = kv(t=4, seed=3)  # fills the capacity exactly
    keys, values = cache.append(k3, v3)
    assert cache.length == 8 and cache.capacity == 8
    assert cache.keys.data_ptr() == key_ptr and cache.values.data_ptr() == value_ptr
    assert cache.k.shape == (2, 2, 8, 4) and cache.v.shape == (2, 2, 8, 4)
    assert torch.equal(cache.k, torch.cat([k1, k2, k3], dim=2))
    assert torch.equal(cache.v, torch.cat([v1, v2, v3], dim=2))
    assert torch.equal(keys, cache.k) and torch.equal(values, cache.v)


def test_kvcache_views_have_the_filled_length():
    cache = KVCache(capacity=10)
    for step in range(1, 5):
        cache.append(*kv(t=1, seed=step))
        assert cache.k.shape == (2, 2, step, 4) and cache.v.shape == (2, 2, step, 4)
        assert cache.k.data_ptr() == cache.keys.data_ptr()


def test_kvcache_grows_past_capacity_keeping_the_contents():
    cache = KVCache(capacity=4)
    parts = [kv(t=3, seed=1), kv(t=3, seed=2)]
    cache.append(*parts[0])
    ptr = cache.keys.data_ptr()
    cache.append(*parts[1])  # 6 > 4: reallocates to twice the size
    assert cache.length == 6 and cache.capacity == 8
    assert cache.keys.data_ptr() != ptr
    parts.append(kv(t=10, seed=3))  # 16 > 8 and > 2 * 8? no: exactly 16
    cache.append(*parts[2])
    assert cache.length == 16 and cache.capacity == 16
    assert torch.equal(cache.k, torch.cat([p[0] for p in parts], dim=2))
    assert torch.equal(cache.v, torch.cat([p[1] for p in parts], dim=2))


def test_kvcache_first_chunk_longer_than_capacity():
    cache = KVCache(capacity=2)
    k, v = kv(t=5)
    cache.append(k, v)
    assert cache.length == 5 and cache.capacity >= 5
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)


def test_kvcache_select_permutation_is_in_place():
    cache = KVCache(capacity=6)
    k, v = kv(batch=3, t=4)
    cache.append(k, v)
    ptr = cache.keys.data_ptr()
    perm = torch.tensor([2, 0, 1])
    cache.select(perm)
    assert cache.keys.data_ptr() == ptr and cache.capacity == 6  # same-size: in place
    assert cache.length == 4 and cache.batch_size == 3
    assert torch.equal(cache.k, k[perm]) and torch.equal(cache.v, v[perm])
    # with repeats, as beam search does (two beams extend the same one)
    cache.select(torch.tensor([1, 1, 0]))
    assert torch.equal(cache.k, k[perm][[1, 1, 0]]) and torch.equal(cache.v, v[perm][[1, 1, 0]])
    # later appends still land after the selected prefix
    k2, v2 = kv(batch=3, t=1, seed=5)
    cache.append(k2, v2)
    assert torch.equal(cache.k, torch.cat([k[perm][[1, 1, 0]], k2], dim=2))


def test_kvcache_select_subset():
    cache = KVCache(capacity=6)
    k, v = kv(batch=4, t=3)
    cache.append(k, v)
    rows = torch.tensor([3, 1])
    cache.select(rows)
    assert cache.batch_size == 2 and cache.length == 3 and cache.capacity == 6
    assert torch.equal(cache.k, k[rows]) and torch.equal(cache.v, v[rows])
    k2, v2 = kv(batch=2, t=2, seed=7)
    cache.append(k2, v2)
    assert torch.equal(cache.k, torch.cat([k[rows], k2], dim=2))
    assert torch.equal(cache.v, torch.cat([v[rows], v2], dim=2))


def test_kvcache_select_on_an_empty_cache_is_a_no_op():
    cache = KVCache(capacity=3)
    cache.select(torch.tensor([0, 0, 1]))
    assert cache.keys is None and cache.length == 0


def test_cross_kvcache_set_and_select():
    cache = KVCache(cross=True)
    assert cache.cross and cache.capacity == 0 and cache.keys is None
    k, v = kv(batch=3, t=5)
    cache.set(k, v)
    assert cache.length == 5 and cache.batch_size == 3
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)
    index = torch.tensor([2, 2, 0, 1])  # beams of sentences: more rows than before
    cache.select(index)
    assert cache.batch_size == 4 and cache.length == 5
    assert torch.equal(cache.k, k[index]) and torch.equal(cache.v, v[index])
    cache.select(torch.tensor([3]))
    assert torch.equal(cache.k, k[[1]]) and torch.equal(cache.v, v[[1]])


def test_kvcache_repr():
    cache = KVCache(capacity=4)
    assert repr(cache) == "KVCache(self, empty, capacity=4)"
    cache.append(*kv(batch=2, heads=3, t=1, dim=5))
    assert repr(cache) == (
        "KVCache(self, batch=2, kv_heads=3, head_dim=5, length=1, capacity=4, "
        "dtype=torch.float32, device=cpu)"
    )
    cross = KVCache(cross=True)
    assert repr(cross) == "KVCache(cross, empty, capacity=0)"
    cross.set(*kv(batch=1, heads=2, t=7, dim=4))
    assert repr(cross).startswith("KVCache(cross, batch=1, kv_heads=2, head_dim=4, length=7,")


def test_kvcache_nbytes_counts_the_allocated_capacity():
    cache = KVCache(capacity=10)
    assert cache.nbytes == 0
    cache.append(*kv(batch=2, heads=3, t=1, dim=4))
    assert cache.nbytes == 2 * (2 * 3 * 10 * 4) * 4  # keys and values, float32
    k = torch.zeros(1, 2, 6, 4, dtype=torch.float64)
    cross = KVCache(cross=True)
    cross.set(k, k.clone())
    assert cross.nbytes == 2 * 48 * 8


def test_kvcache_reset():
    cache = KVCache(capacity=4)
    cache.append(*kv(t=3))
    ptr = cache.keys.data_ptr()
    cache.reset()
    assert cache.length == 0 and cache.k.shape[2] == 0
    assert cache.keys.data_ptr() == ptr  # buffers kept
    k, v = kv(t=2, seed=9)
    cache.append(k, v)
    assert cache.keys.data_ptr() == ptr
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)

    cross = KVCache(cross=True)
    cross.set(*kv(t=3))
    cross.reset()
    assert cross.length == 0 and cross.keys is None and cross.values is None


# -- MultiHeadAttention with a cache ---------------------------------------------------------

D, H = 16, 4


def attention(positional: str | None, num_kv_heads: int | None, seed: int = 0):
    pos = {"rope": RotaryEmbedding(D // H), "alibi": ALiBi(H), None: None}[positional]
    torch.manual_seed(seed)
    return MultiHeadAttention(D, H, num_kv_heads=num_kv_heads, positional=pos).eval()


MHA_CASES = [(p, kvh) for p in (None, "rope", "alibi") for kvh in (None, 2)]


@pytest.mark.parametrize(("positional", "num_kv_heads"), MHA_CASES)
@pytest.mark.parametrize("chunks", [[1] * 6, [3, 1, 2]], ids=["one-by-one", "chunks-3-1-2"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast-path", "with-weights"])
def test_mha_cached_steps_equal_full_causal_attention(
    positional, num_kv_heads, chunks, need_weights
):
    mha = attention(positional, num_kv_heads)
    x = randn(2, sum(chunks), D, seed=1)
    with torch.no_grad():
        full, full_w = mha(x, is_causal=True, need_weights=True)
        cache = KVCache(capacity=2)  # small: the cache grows on the way
        outs, start = [], 0
        for n in chunks:
            out, w = mha(
                x[:, start : start + n], is_causal=True, need_weights=need_weights, cache=cache
            )
            assert cache.length == start + n
            if need_weights:
                assert w.shape == (2, H, n, start + n)
                close(w, full_w[:, :, start : start + n, : start + n])
            else:
                assert w is None
            outs.append(out)
            start += n
    close(torch.cat(outs, dim=1), full)
    assert cache.k.shape == (2, num_kv_heads or H, sum(chunks), D // H)


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_mha_cached_steps_accept_the_consistent_offset(positional):
    mha = attention(positional, None)
    x = randn(1, 4, D, seed=2)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True)
        cache = KVCache(capacity=4)
        outs = [mha(x[:, t : t + 1], is_causal=True, offset=t, cache=cache)[0] for t in range(4)]
    close(torch.cat(outs, dim=1), full)


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_mha_memory_cache_equals_passing_the_context(num_kv_heads):
    mha = attention(None, num_kv_heads)
    y, context = randn(3, 4, D, seed=3), randn(3, 6, D, seed=4)
    real = torch.ones(3, 6, dtype=torch.bool)
    real[1, 4:] = False
    real[2, 2:] = False
    mask = key_mask(real)
    with torch.no_grad():
        expected, expected_w = mha(y, context, mask=mask, need_weights=True)
        cache = mha.memory_cache(context)
        assert cache.cross and cache.length == 6 and cache.batch_size == 3
        assert cache.k.shape == (3, num_kv_heads or H, 6, D // H)
        out, w = mha(y, mask=mask, need_weights=True, cache=cache)
        close(out, expected)
        close(w, expected_w)
        assert bool((w[1, :, :, 4:] == 0).all()) and bool((w[2, :, :, 2:] == 0).all())
        # one query at a time, reusing the same cache (it never changes)
        steps = [mha(y[:, t : t + 1], mask=mask, cache=cache)[0] for t in range(4)]
        close(torch.cat(steps, dim=1), expected)
        no_mask, _ = mha(y, cache=cache)
        close(no_mask, mha(y, context)[0])
        _, avg_w = mha(y, mask=mask, need_weights=True, average_weights=True, cache=cache)
        close(avg_w, expected_w.mean(dim=1))
    assert cache.length == 6


def test_mha_memory_cache_with_separate_key_and_value_widths():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, kdim=10, vdim=12).eval()
    y, context, value = randn(2, 3, D, seed=5), randn(2, 5, 10, seed=6), randn(2, 5, 12, seed=7)
    with torch.no_grad():
        expected, _ = mha(y, context, value=value)
        out, _ = mha(y, cache=mha.memory_cache(context, value))
    close(out, expected)


# -- the models: cached decoding equals full recomputation ------------------------------------


@pytest.mark.parametrize("overrides", MODEL_VARIANTS, ids=VARIANT_IDS)
def test_transformer_cached_decoding_equals_full_recomputation(overrides):
    model = build(Transformer, tiny(**overrides))
    src = token_ids(2, 9, seed=1)
    src[1, 5:] = PAD  # a padded source: its keys must stay masked in the cached memory
    tgt = token_ids(2, 8, seed=2)
    tgt[:, 0] = BOS
    with torch.no_grad():
        memory, mask = model.encode(src), model.source_mask(src)
        assert mask is not None
        cache = model.new_cache(memory, mask, capacity=3)  # grows on the way
        teacher = model(src, tgt)
        for t in range(tgt.shape[1]):
            step = model.decode(tgt[:, t : t + 1], cache=cache)
            assert step.shape == (2, 1, model.config.target_vocab_size)
            full = model.decode(tgt[:, : t + 1], memory, mask)[:, -1]
            close(step[:, -1], full)
            close(step[:, -1], teacher[:, t])
            assert cache.length == t + 1


@pytest.mark.parametrize("overrides", MODEL_VARIANTS, ids=VARIANT_IDS)
def test_lm_cached_decoding_equals_full_recomputation(overrides):
    model = build(TransformerLM, tiny(**overrides))
    ids = token_ids(2, 9, seed=3)
    with torch.no_grad():
        cache = model.new_cache(capacity=2)
        teacher = model(ids)
        for t in range(ids.shape[1]):
            step = model(ids[:, t : t + 1], cache=cache)
            close(step[:, -1], model(ids[:, : t + 1])[:, -1])
            close(step[:, -1], teacher[:, t])
        assert cache.length == ids.shape[1]


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_cached_decoding_in_chunks(positional):
    """A prompt of several tokens at once, then one token, then two."""
    lm = build(TransformerLM, tiny(positional=positional))
    tr = build(Transformer, tiny(positional=positional))
    ids = token_ids(2, 7, seed=4)
    src = token_ids(2, 5, seed=5)
    src[0, 3:] = PAD
    with torch.no_grad():
        lm_full = lm(ids)
        memory, mask = tr.encode(src), tr.source_mask(src)
        tr_full = tr.decode(ids, memory, mask)
        lm_cache, tr_cache = lm.new_cache(capacity=7), tr.new_cache(memory, mask, capacity=7)
        start = 0
        for n in (4, 1, 2):
            chunk = ids[:, start : start + n]
            close(lm(chunk, cache=lm_cache), lm_full[:, start : start + n])
            close(tr.decode(chunk, cache=tr_cache), tr_full[:, start : start + n])
            start += n


PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_left_padded_lm_batch_equals_each_row_alone(positional):
    model = build(TransformerLM, tiny(positional=positional))
    batch = left_padded(PROMPTS)
    width = batch.shape[1]
    continuation = token_ids(3, 4, seed=6)
    with torch.no_grad():
        full = model(batch)
        for i, p in enumerate(PROMPTS):
            alone = model(torch.tensor([p]))[0]
            close(full[i, width - len(p) :], alone)

        cache = model.new_cache(capacity=4)
        step = model(batch, cache=cache)[:, -1]
        assert cache.real is not None and cache.real.shape == (3, width)
        rows = [list(p) for p in PROMPTS]
        for t in range(continuation.shape[1] + 1):
            expected = torch.stack([model(torch.tensor([r]))[0, -1] for r in rows])
            close(step, expected)
            if t == continuation.shape[1]:
                break
            nxt = continuation[:, t : t + 1]
            rows = [[*r, int(nxt[i, 0])] for i, r in enumerate(rows)]
            step = model(nxt, cache=cache)[:, -1]
        assert cache.real.shape == (3, width + continuation.shape[1])
        # the full forward of the padded batch with its continuation agrees too
        whole = model(torch.cat([batch, continuation], dim=1))
        for i, r in enumerate(rows):
            close(whole[i, -len(r) :], model(torch.tensor([r]))[0])


# -- DecoderCache.select: beam reordering and batch pruning ------------------------------------


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary", "alibi"])
@pytest.mark.parametrize(
    "index", [[2, 0, 1], [1, 1, 0], [2, 2, 2]], ids=["permutation", "repeats", "one-row"]
)
def test_decoder_cache_select_reorders_beams_of_one_source(positional, index):
    model = build(Transformer, tiny(positional=positional))
    src = token_ids(1, 6, seed=7)
    src[0, 4:] = PAD
    src = src.expand(3, -1)  # three beams of one (padded) sentence
    prefix = token_ids(3, 4, seed=8)
    prefix[:, 0] = BOS
    nxt = token_ids(3, 1, seed=9)
    index = torch.tensor(index)
    with torch.no_grad():
        memory, mask = model.encode(src), model.source_mask(src)
        cache = model.new_cache(memory, mask, capacity=8)
        model.decode(prefix, cache=cache)
        cache.select(index, cross=False)
        assert cache.length == 4
        step = model.decode(nxt, cache=cache)[:, -1]
        expected = model.decode(torch.cat([prefix[index], nxt], dim=1), memory, mask)[:, -1]
    close(step, expected)


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_decoder_cache_select_prunes_and_reorders_sentences(positional):
    model = build(Transformer, tiny(positional=positional))
    src = token_ids(3, 6, seed=10)
    src[1, 3:] = PAD
    src[2, 5:] = PAD
    prefix = token_ids(3, 3, seed=11)
    prefix[:, 0] = BOS
    index = torch.tensor([2, 1])  # sentence 0 finished; the others swap places
    nxt = token_ids(2, 1, seed=12)
    with torch.no_grad():
        memory, mask = model.encode(src), model.source_mask(src)
        cache = model.new_cache(memory, mask, capacity=8)
        model.decode(prefix, cache=cache)
        cache.select(index)  # cross=True: the memory's rows follow
        assert cache.memory_mask.shape[0] == 2
        step = model.decode(nxt, cache=cache)[:, -1]
        tgt = torch.cat([prefix[index], nxt], dim=1)
        expected = model.decode(tgt, memory[index], mask[index])[:, -1]
    close(step, expected)


@pytest.mark.parametrize("positional", ["learned", "alibi"])
def test_decoder_cache_select_keeps_the_padding_flags_of_left_padded_rows(positional):
    model = build(TransformerLM, tiny(positional=positional))
    batch = left_padded(PROMPTS)
    index = torch.tensor([1, 2, 1, 0])
    nxt = token_ids(4, 1, seed=13)
    with torch.no_grad():
        cache = model.new_cache(capacity=8)
        model(batch, cache=cache)
        cache.select(index)
        assert cache.real.shape == (4, batch.shape[1])
        step = model(nxt, cache=cache)[:, -1]
        for row, i in enumerate(index.tolist()):
            alone = model(torch.tensor([[*PROMPTS[i], int(nxt[row, 0])]]))[0, -1]
            close(step[row], alone)


def test_decoder_cache_bookkeeping():
    model = build(Transformer, tiny(num_decoder_layers=3))
    src = token_ids(2, 5, seed=14)
    with torch.no_grad():
        memory = model.encode(src)
        cache = model.new_cache(memory, capacity=6)
        assert isinstance(cache, DecoderCache)
        assert len(cache.self_attn) == 3 and len(cache.cross_attn) == 3
        assert cache.length == 0 and cache.memory_mask is None
        assert all(c.cross and c.length == 5 for c in cache.cross_attn)
        model.decode(torch.full((2, 1), BOS), cache=cache)
        assert cache.length == 1
        assert cache.nbytes == sum(c.nbytes for c in cache.self_attn + cache.cross_attn)
        assert repr(cache) == (
            f"DecoderCache(layers=3, length=1, capacity=6, cross=5 positions, padded=False, "
            f"nbytes={cache.nbytes})"
        )
    lm_cache = build(TransformerLM, tiny()).new_cache(capacity=4)
    assert lm_cache.cross_attn is None and "cross=none" in repr(lm_cache)


# -- errors ------------------------------------------------------------------------------------


def _filled_cache(batch: int = 2, t: int = 3) -> KVCache:
    cache = KVCache(capacity=8)
    with torch.no_grad():
        attention(None, None)(randn(batch, t, D), is_causal=True, cache=cache)
    return cache


def _models():
    tr = build(Transformer, tiny(num_decoder_layers=2))
    src = token_ids(2, 4, seed=0)
    with torch.no_grad():
        memory = tr.encode(src)
    return tr, memory


def _decode_with(cache_of: Callable[[Transformer, Tensor], object]) -> None:
    tr, memory = _models()
    with torch.no_grad():
        tr.decode(torch.full((2, 1), BOS), cache=cache_of(tr, memory))


def _fewer_layers(tr: Transformer, memory: Tensor) -> DecoderCache:
    cache = tr.new_cache(memory, capacity=4)
    return DecoderCache(cache.self_attn[:1], cache.cross_attn[:1])


def _past_max_len(cls: type, left_pad: bool = False) -> None:
    model = build(cls, tiny(positional="learned", max_len=4))
    with torch.no_grad():
        if cls is Transformer:
            src = token_ids(1, 3, seed=0)
            memory = model.encode(src)
            cache = model.new_cache(memory, capacity=8)
            for _ in range(5):
                model.decode(torch.full((1, 1), BOS), cache=cache)
        else:
            cache = model.new_cache(capacity=8)
            first = torch.tensor([[PAD, 5, 6, 7], [4, 5, 6, 7]]) if left_pad else token_ids(2, 4, 1)
            model(first, cache=cache)
            model(token_ids(2, 1, seed=2), cache=cache)


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    (
        "kvcache-capacity-zero",
        lambda: KVCache(capacity=0),
        ValueError,
        r"^capacity: expected a positive int, got 0",
    ),
    (
        "kvcache-capacity-none",
        lambda: KVCache(),
        ValueError,
        r"^capacity: expected a positive int, got None",
    ),
    (
        "kvcache-cross-with-capacity",
        lambda: KVCache(capacity=5, cross=True),
        ValueError,
        r"^capacity: a cross-attention cache holds the whole memory",
    ),
    (
        "kvcache-append-to-cross",
        lambda: KVCache(cross=True).append(*kv()),
        ValueError,
        r"^cache: a cross-attention cache is filled once; use set\(\)",
    ),
    (
        "kvcache-set-on-self",
        lambda: KVCache(capacity=3).set(*kv()),
        ValueError,
        r"^cache: set\(\) is for cross-attention caches",
    ),
    (
        "kvcache-append-other-batch",
        lambda: _filled_cache(batch=2).append(*kv(batch=3, heads=H, dim=D // H)),
        ValueError,
        r"^cache: holds keys \(2, 4\) x 4 .* a cache serves one module and one batch",
    ),
    (
        "kvcache-select-not-long",
        lambda: _filled_cache().select(torch.tensor([0.0, 1.0])),
        ValueError,
        r"^index: expected a 1-D int64 tensor of rows",
    ),
    (
        "mha-cache-not-kvcache",
        lambda: attention(None, None)(randn(2, 1, D), cache={}),
        TypeError,
        r"^cache: expected an attnlab KVCache, got dict",
    ),
    (
        "mha-self-cache-with-context",
        lambda: attention(None, None)(randn(2, 1, D), randn(2, 4, D), cache=KVCache(capacity=4)),
        ValueError,
        r"^cache: a self-attention cache was given with a context",
    ),
    (
        "mha-empty-cross-cache",
        lambda: attention(None, None)(randn(2, 1, D), cache=KVCache(cross=True)),
        ValueError,
        r"^cache: an empty cross-attention cache; build it with memory_cache\(context\)",
    ),
    (
        "mha-cross-cache-with-context",
        lambda: (lambda m: m(randn(2, 1, D), randn(2, 4, D), cache=m.memory_cache(randn(2, 4, D))))(
            attention(None, None)
        ),
        ValueError,
        r"^context: the cross-attention cache already holds",
    ),
    (
        "mha-cross-cache-with-value",
        lambda: (
            lambda m: m(randn(2, 1, D), value=randn(2, 4, D), cache=m.memory_cache(randn(2, 4, D)))
        )(attention(None, None)),
        ValueError,
        r"^value: the cross-attention cache already holds the values",
    ),
    (
        "mha-self-cache-batch-mismatch",
        lambda: attention(None, None)(randn(3, 1, D), is_causal=True, cache=_filled_cache(batch=2)),
        ValueError,
        r"^cache: holds 2 rows, x has batch size 3 \(x \(3, 1, 16\)\)",
    ),
    (
        "mha-cross-cache-batch-mismatch",
        lambda: (lambda m: m(randn(3, 1, D), cache=m.memory_cache(randn(2, 4, D))))(
            attention(None, None)
        ),
        ValueError,
        r"^cache: holds 2 rows, x has batch size 3",
    ),
    (
        "mha-offset-inconsistent-with-cache",
        lambda: attention("rope", None)(randn(2, 1, D), offset=1, cache=_filled_cache(t=3)),
        ValueError,
        r"^offset: with a cache the positions continue from cache\.length=3; got offset=1",
    ),
    (
        "transformer-decode-cache-and-memory",
        lambda: (
            lambda tr, mem: tr.decode(
                torch.full((2, 1), BOS), mem, cache=tr.new_cache(mem, capacity=4)
            )
        )(*_models()),
        ValueError,
        r"^memory: the cache holds the memory \(new_cache\); pass memory=None",
    ),
    (
        "transformer-decode-cache-wrong-type",
        lambda: _decode_with(lambda tr, mem: [KVCache(capacity=4)] * 2),
        TypeError,
        r"^cache: expected a DecoderCache \(Decoder\.new_cache\), got list",
    ),
    (
        "lm-forward-cache-kvcache-instead",
        lambda: build(TransformerLM, tiny())(token_ids(2, 1, 0), cache=KVCache(capacity=4)),
        TypeError,
        r"^cache: expected a DecoderCache .*got KVCache",
    ),
    (
        "decoder-cache-wrong-type",
        lambda: (lambda tr, mem: tr.decoder(randn(2, 1, 64), cache=[KVCache(capacity=4)] * 2))(
            *_models()
        ),
        TypeError,
        r"^cache: expected a DecoderCache \(Decoder\.new_cache\), got list",
    ),
    (
        "decoder-cache-kvcache-instead",
        lambda: build(TransformerLM, tiny()).decoder(randn(2, 1, 64), cache=KVCache(capacity=4)),
        TypeError,
        r"^cache: expected a DecoderCache .*got KVCache",
    ),
    (
        "decoder-cache-wrong-layer-count",
        lambda: _decode_with(_fewer_layers),
        ValueError,
        r"^cache: holds 1 layers, the decoder has 2",
    ),
    (
        "decoder-cache-of-a-language-model",
        lambda: _decode_with(lambda tr, mem: DecoderCache([KVCache(capacity=4) for _ in range(2)])),
        ValueError,
        r"^cache: made for a decoder with other cross-attention",
    ),
    (
        "decoder-new-cache-without-memory",
        lambda: build(Transformer, tiny()).decoder.new_cache(4),
        ValueError,
        r"^memory: required, the encoder output",
    ),
    (
        "lm-decoder-new-cache-with-memory",
        lambda: build(TransformerLM, tiny()).decoder.new_cache(4, randn(1, 3, 64)),
        ValueError,
        r"^memory: this decoder has no cross-attention",
    ),
    (
        "transformer-new-cache-capacity-zero",
        lambda: (lambda tr, mem: tr.new_cache(mem, capacity=0))(*_models()),
        ValueError,
        r"^capacity: expected a positive int, got 0",
    ),
    (
        "transformer-new-cache-bad-memory",
        lambda: (lambda tr, mem: tr.new_cache(mem[0], capacity=4))(*_models()),
        ValueError,
        r"^memory: expected shape \(B, S, d_model=64\)",
    ),
    (
        "lm-new-cache-capacity-zero",
        lambda: build(TransformerLM, tiny()).new_cache(capacity=0),
        ValueError,
        r"^capacity: expected a positive int, got 0",
    ),
    (
        "transformer-learned-positions-past-max_len",
        lambda: _past_max_len(Transformer),
        ValueError,
        r"exceed max_len=4",
    ),
    (
        "lm-learned-positions-past-max_len",
        lambda: _past_max_len(TransformerLM),
        ValueError,
        r"exceed max_len=4",
    ),
    (
        "lm-left-padded-learned-positions-past-max_len",
        lambda: _past_max_len(TransformerLM, left_pad=True),
        ValueError,
        r"exceed max_len=4",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_cache_use_raises_naming_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert type(info.value) is exc


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
