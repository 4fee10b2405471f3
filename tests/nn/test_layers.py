"""Layers and stacks against the references someone else wrote: torch.nn's Transformer modules.

``EncoderLayer``, ``DecoderLayer``, ``Encoder`` and ``Decoder`` are copied from
``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` / ``TransformerEncoder`` /
``TransformerDecoder`` (and the stacks of a full ``torch.nn.Transformer``) with ``from_torch`` and
must compute the same outputs and gradients. Mask polarity differs: torch's bool padding masks
mean True = ignore, attnlab's ``key_mask(real)`` means True = real token.

Tolerances: 1e-5 absolute (and relative) in float32, 1e-10 in float64; exact (``== 0``) where the
property is exact (masked attention weights).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, key_mask
from attnlab.nn.masks import causal_mask, padding_mask

ATOL = 1e-5
ATOL64 = 1e-10
D, H, FF = 16, 4, 32  # d_model, heads, d_ff of the modules below
B, T, S = 3, 7, 6  # batch, target length, source length

CONFIGS = [
    pytest.param(norm_first, activation, batch_first, id=f"{ln}-{activation}-{bf}")
    for norm_first, ln in ((False, "postLN"), (True, "preLN"))
    for activation in ("relu", "gelu")
    for batch_first, bf in ((True, "batch_first"), (False, "seq_first"))
]
CONFIG_NAMES = ("norm_first", "activation", "batch_first")


# -- helpers ---------------------------------------------------------------------------------


def prepare(module: nn.Module, seed: int) -> nn.Module:
    """Random weights *and* biases: torch zero-initialises biases and sets LayerNorm to (1, 0),
    which would hide a bias or norm that is copied wrong or not at all. LayerNorm gains stay
    around 1 so that post-LN stacks keep a sensible scale."""
    g = torch.Generator().manual_seed(seed)
    gains = {id(m.weight) for m in module.modules() if isinstance(m, nn.LayerNorm)}
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if p.dim() == 2:
                p.copy_(noise * p.shape[-1] ** -0.5)
            elif id(p) in gains:
                p.copy_(1.0 + 0.3 * noise)
            else:  # biases
                p.copy_(0.3 * noise)
    return module


def lengths_real(lengths: list[int], total: int) -> Tensor:
    """``(B, total)`` padding mask, True on real tokens (attnlab's polarity)."""
    return padding_mask(lengths, total)


def seq_first(t: Tensor, batch_first: bool) -> Tensor:
    """What torch gets: batch-first as it is, else ``(T, B, E)``."""
    return t if batch_first else t.transpose(0, 1)


def torch_causal(t: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return nn.Transformer.generate_square_subsequent_mask(t, dtype=dtype)


def assert_close(actual: Tensor, expected: Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=atol)


def torch_name(ours: str) -> str:
    """attnlab parameter name -> torch.nn's: ``self_attn.in_proj.weight`` is
    ``self_attn.in_proj_weight``, ``ff.linear1`` is ``linear1``, ``cross_attn`` is
    ``multihead_attn``; norms and ``out_proj`` keep their names."""
    name = ours.replace("cross_attn.", "multihead_attn.").replace("ff.", "")
    return name.replace("in_proj.weight", "in_proj_weight").replace("in_proj.bias", "in_proj_bias")


def quietly(call, *args, **kwargs):
    """Call a torch module, silencing its prototype / mixed-mask-type warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def torch_transformer(seed: int, **options) -> nn.Transformer:
    """A 2 + 2 layer torch.nn.Transformer with random weights and biases (see ``prepare``)."""
    torch.manual_seed(0)
    ref = quietly(
        nn.Transformer,
        D,
        H,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=FF,
        **options,
    )
    return prepare(ref, seed=seed)


def torch_layer(cls: type, norm_first: bool, activation: str, batch_first: bool, **kw):
    """A torch.nn.Transformer{Encoder,Decoder}Layer of the tests' widths."""
    return cls(
        D,
        H,
        FF,
        dropout=kw.pop("dropout", 0.1),
        activation=activation,
        norm_first=norm_first,
        batch_first=batch_first,
        **kw,
    )


def torch_encoder_layer(norm_first: bool, activation: str, batch_first: bool, **kw):
    return torch_layer(nn.TransformerEncoderLayer, norm_first, activation, batch_first, **kw)


def torch_decoder_layer(norm_first: bool, activation: str, batch_first: bool, **kw):
    return torch_layer(nn.TransformerDecoderLayer, norm_first, activation, batch_first, **kw)


# -- forward parity, eval mode ---------------------------------------------------------------

SRC_LENGTHS = [S, 4, 1]  # one full row, one half, one with a single real token
TGT_LENGTHS = [T, 5, 2]


@pytest.mark.parametrize(CONFIG_NAMES, CONFIGS)
def test_encoder_layer_matches_torch(norm_first: bool, activation: str, batch_first: bool):
    torch.manual_seed(0)
    ref = prepare(torch_encoder_layer(norm_first, activation, batch_first), seed=1).eval()
    ours = EncoderLayer.from_torch(ref)
    assert not ours.training and ours.norm_first is norm_first
    x = torch.randn(B, S, D)
    real = lengths_real(SRC_LENGTHS, S)
    # With grad enabled torch takes its Python path; under no_grad (eval, batch_first) its fused
    # kernel. A single layer computes every position in both, so all positions are compared.
    expected = seq_first(ref(seq_first(x, batch_first), src_key_padding_mask=~real), batch_first)
    with torch.no_grad():
        fused = seq_first(
            quietly(ref, seq_first(x, batch_first), src_key_padding_mask=~real), batch_first
        )
        out, weights = ours(x, mask=key_mask(real))
    assert weights is None
    assert_close(out, expected.detach())
    assert_close(out, fused)


@pytest.mark.parametrize(CONFIG_NAMES, CONFIGS)
def test_decoder_layer_matches_torch(norm_first: bool, activation: str, batch_first: bool):
    torch.manual_seed(0)
    ref = prepare(torch_decoder_layer(norm_first, activation, batch_first), seed=2).eval()
    ours = DecoderLayer.from_torch(ref)
    assert not ours.training and ours.has_cross_attention
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    src_real, tgt_real = lengths_real(SRC_LENGTHS, S), lengths_real(TGT_LENGTHS, T)
    with torch.no_grad():
        expected = quietly(
            ref,
            seq_first(x, batch_first),
            seq_first(memory, batch_first),
            tgt_mask=torch_causal(T),
            tgt_key_padding_mask=~tgt_real,
            memory_key_padding_mask=~src_real,
            tgt_is_causal=True,
        )
        out, self_w, cross_w = ours(
            x, memory, self_mask=key_mask(tgt_real), memory_mask=key_mask(src_real)
        )
    assert self_w is None and cross_w is None
    assert_close(out, seq_first(expected, batch_first))


@pytest.mark.parametrize("nested", [True, False], ids=["nested", "no_nested"])
@pytest.mark.parametrize(CONFIG_NAMES, CONFIGS)
def test_encoder_stack_matches_torch(
    norm_first: bool, activation: str, batch_first: bool, nested: bool
):
    """torch.nn.TransformerEncoder in eval mode with a key padding mask may take its nested-tensor
    fast path (post-LN, batch_first, no grad): it drops the padded positions and returns *zeros*
    there, where attnlab (and torch's own slow path) compute the padded positions like any other.
    With ``enable_nested_tensor=True`` only the real positions are comparable; with
    ``enable_nested_tensor=False`` every position is."""
    torch.manual_seed(0)
    layer = torch_encoder_layer(norm_first, activation, batch_first)
    ref = quietly(
        nn.TransformerEncoder, layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=nested
    )
    ref = prepare(ref, seed=3).eval()
    ours = Encoder.from_torch(ref)
    assert len(ours.layers) == 2 and ours.norm is not None and not ours.training
    x = torch.randn(B, S, D)
    real = lengths_real(SRC_LENGTHS, S)
    with torch.no_grad():
        expected = seq_first(
            quietly(ref, seq_first(x, batch_first), src_key_padding_mask=~real), batch_first
        )
        out, weights = ours(x, mask=key_mask(real))
    assert weights is None
    assert_close(out[real], expected[real])
    if not nested:
        assert_close(out, expected)


@pytest.mark.parametrize(CONFIG_NAMES, CONFIGS)
def test_decoder_stack_matches_torch(norm_first: bool, activation: str, batch_first: bool):
    torch.manual_seed(0)
    layer = torch_decoder_layer(norm_first, activation, batch_first)
    ref = prepare(nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(D)), seed=4).eval()
    ours = Decoder.from_torch(ref)
    assert len(ours.layers) == 2 and ours.norm is not None
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    src_real = lengths_real(SRC_LENGTHS, S)
    with torch.no_grad():
        expected = quietly(
            ref,
            seq_first(x, batch_first),
            seq_first(memory, batch_first),
            tgt_mask=torch_causal(T),
            memory_key_padding_mask=~src_real,
            tgt_is_causal=True,
        )
        out, _, _ = ours(x, memory, memory_mask=key_mask(src_real))  # is_causal=True default
    assert_close(out, seq_first(expected, batch_first))


@pytest.mark.parametrize(CONFIG_NAMES, CONFIGS)
def test_full_torch_transformer_stacks(norm_first: bool, activation: str, batch_first: bool):
    """``Encoder.from_torch(ref.encoder)`` and ``Decoder.from_torch(ref.decoder)`` of a whole
    torch.nn.Transformer reproduce ``ref(src, tgt, ...)``. torch's encoder here may take the
    nested-tensor path (zeros at padded source positions), so the memory is compared at real
    positions; the decoder's output is comparable everywhere because padded memory positions
    are masked out of cross-attention in both."""
    ref = torch_transformer(
        seed=5, activation=activation, batch_first=batch_first, norm_first=norm_first
    ).eval()
    encoder, decoder = Encoder.from_torch(ref.encoder), Decoder.from_torch(ref.decoder)
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    src_real = lengths_real(SRC_LENGTHS, S)
    with torch.no_grad():
        expected = quietly(
            ref,
            seq_first(src, batch_first),
            seq_first(tgt, batch_first),
            tgt_mask=torch_causal(T),
            src_key_padding_mask=~src_real,
            memory_key_padding_mask=~src_real,
            tgt_is_causal=True,
        )
        expected_memory = quietly(
            ref.encoder, seq_first(src, batch_first), src_key_padding_mask=~src_real
        )
        memory, _ = encoder(src, mask=key_mask(src_real))
        out, _, _ = decoder(tgt, memory, memory_mask=key_mask(src_real))
    assert_close(memory[src_real], seq_first(expected_memory, batch_first)[src_real])
    assert_close(out, seq_first(expected, batch_first))


def test_stack_without_torch_norm_has_no_final_norm():
    torch.manual_seed(0)
    for norm_first in (False, True):
        layer = torch_encoder_layer(norm_first, "relu", True)
        ref = prepare(quietly(nn.TransformerEncoder, layer, 2), seed=6).eval()  # norm=None
        ours = Encoder.from_torch(ref)
        assert ours.norm is None  # even for pre-LN: from_torch copies what torch has
        x = torch.randn(2, 5, D)
        with torch.no_grad():
            assert_close(ours(x)[0], quietly(ref, x))


def test_stack_final_norm_eps_is_copied_from_torch():
    """The final norm may have another epsilon than the layers' norms."""
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(D, H, FF, batch_first=True, layer_norm_eps=1e-6)
    ref = prepare(nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(D, eps=0.5)), seed=7).eval()
    ours = Decoder.from_torch(ref)
    assert ours.layers[0].norm1.eps == 1e-6
    assert ours.norm.eps == 0.5
    x, memory = torch.randn(2, 4, D), torch.randn(2, 3, D)
    with torch.no_grad():
        expected = ref(x, memory, tgt_mask=torch_causal(4), tgt_is_causal=True)
        assert_close(ours(x, memory)[0], expected)


def test_from_torch_keeps_training_mode_dtype_and_dropout():
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.25, batch_first=True, dtype=torch.float64)
    ours = EncoderLayer.from_torch(ref)
    assert ours.training
    assert ours.norm1.weight.dtype == torch.float64
    # torch uses one rate for residuals, attention weights and the FFN; so does the copy
    assert ours.dropout == 0.25
    assert ours.self_attn.dropout == 0.25
    assert ours.ff.activation_dropout == 0.25
    assert not DecoderLayer.from_torch(nn.TransformerDecoderLayer(D, H, FF).eval()).training


def test_from_torch_gelu_tanh_module_activation():
    """``nn.GELU(approximate="tanh")`` maps to ``gelu_tanh``. Compared with torch's Python path
    (grad enabled): torch's fused eval kernel (no_grad) treats every ``nn.GELU`` as the exact
    GELU and ignores ``approximate`` (torch 2.x), about 4e-4 away from both."""
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        D, H, FF, activation=nn.GELU(approximate="tanh"), batch_first=True
    )
    ref = prepare(ref, seed=8).eval()
    ours = EncoderLayer.from_torch(ref)
    assert ours.ff.activation == "gelu_tanh"
    x = torch.randn(2, 5, D)
    expected = ref(x).detach()  # grad enabled: torch's Python path, which honours approximate
    with torch.no_grad():
        assert_close(ours(x)[0], expected)


# -- gradient parity, train mode with dropout 0 ------------------------------------------------


def _assert_same_grads(ours: nn.Module, ref: nn.Module, atol: float) -> None:
    """Every parameter of ``ours`` has a torch twin (names mapped) with the same gradient, and
    no torch parameter is left out."""
    theirs = dict(ref.named_parameters())
    mapped = {torch_name(name): p for name, p in ours.named_parameters()}
    assert set(mapped) == set(theirs)
    for name, p in mapped.items():
        assert p.grad is not None and theirs[name].grad is not None, name
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=atol, rtol=atol, msg=name)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_encoder_layer_gradients_match_torch(norm_first: bool, activation: str):
    torch.manual_seed(0)
    ref = torch_encoder_layer(norm_first, activation, batch_first=True, dropout=0.0)
    ref = prepare(ref, seed=9).train()
    ours = EncoderLayer.from_torch(ref)
    assert ours.training
    x = torch.randn(B, S, D)
    real = lengths_real(SRC_LENGTHS, S)
    upstream = torch.randn(B, S, D)
    x_ours, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    (ours(x_ours, mask=key_mask(real))[0] * upstream).sum().backward()
    (ref(x_ref, src_key_padding_mask=~real) * upstream).sum().backward()
    assert_close(x_ours.grad, x_ref.grad)
    _assert_same_grads(ours, ref, ATOL)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_decoder_layer_gradients_match_torch(norm_first: bool, activation: str):
    torch.manual_seed(0)
    ref = torch_decoder_layer(norm_first, activation, batch_first=True, dropout=0.0)
    ref = prepare(ref, seed=10).train()
    ours = DecoderLayer.from_torch(ref)
    src_real = lengths_real(SRC_LENGTHS, S)
    x, memory, upstream = torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, T, D)
    inputs_ours = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
    inputs_ref = [x.clone().requires_grad_(), memory.clone().requires_grad_()]
    out = ours(*inputs_ours, memory_mask=key_mask(src_real))[0]
    expected = quietly(
        ref,
        *inputs_ref,
        tgt_mask=torch_causal(T),
        memory_key_padding_mask=~src_real,
        tgt_is_causal=True,
    )
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for got, want in zip(inputs_ours, inputs_ref, strict=True):
        assert_close(got.grad, want.grad)
    _assert_same_grads(ours, ref, ATOL)


def _transformer_grads(dtype: torch.dtype, norm_first: bool, activation: str, atol: float):
    ref = torch_transformer(
        seed=11,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        dtype=dtype,
    ).train()
    encoder, decoder = Encoder.from_torch(ref.encoder), Decoder.from_torch(ref.decoder)
    assert encoder.norm.weight.dtype == dtype
    src_real = lengths_real(SRC_LENGTHS, S)
    src, tgt = torch.randn(B, S, D, dtype=dtype), torch.randn(B, T, D, dtype=dtype)
    upstream = torch.randn(B, T, D, dtype=dtype)
    ins_ours = [src.clone().requires_grad_(), tgt.clone().requires_grad_()]
    ins_ref = [src.clone().requires_grad_(), tgt.clone().requires_grad_()]
    memory, _ = encoder(ins_ours[0], mask=key_mask(src_real))
    out, _, _ = decoder(ins_ours[1], memory, memory_mask=key_mask(src_real))
    expected = quietly(
        ref,
        *ins_ref,
        tgt_mask=torch_causal(T, dtype),
        src_key_padding_mask=~src_real,
        memory_key_padding_mask=~src_real,
        tgt_is_causal=True,
    )
    assert_close(out, expected, atol)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for got, want in zip(ins_ours, ins_ref, strict=True):
        assert_close(got.grad, want.grad, atol)
    _assert_same_grads(encoder, ref.encoder, atol)
    _assert_same_grads(decoder, ref.decoder, atol)


@pytest.mark.parametrize(
    ("norm_first", "activation"), [(False, "relu"), (True, "gelu")], ids=["postLN", "preLN"]
)
def test_full_transformer_gradients_match_torch(norm_first: bool, activation: str):
    _transformer_grads(torch.float32, norm_first, activation, ATOL)


def test_full_transformer_float64_parity():
    """In float64 the outputs and every gradient agree to 1e-10."""
    _transformer_grads(torch.float64, True, "gelu", ATOL64)


# -- pre-LN and post-LN: where the LayerNorm goes ----------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_encoder_layer_norm_placement(norm_first: bool):
    """post-LN: x = LN(x + f(x)); pre-LN: x = x + f(LN(x)), written from the layer's own
    sub-modules (dropout 0), for each of the two sub-layers."""
    torch.manual_seed(0)
    layer = prepare(EncoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first), seed=12).eval()
    x = torch.randn(B, S, D)
    mask = key_mask(lengths_real(SRC_LENGTHS, S))

    def attend(h: Tensor) -> Tensor:
        return layer.self_attn(h, mask=mask)[0]

    with torch.no_grad():
        if norm_first:
            h = x + attend(layer.norm1(x))
            expected = h + layer.ff(layer.norm2(h))
        else:
            h = layer.norm1(x + attend(x))
            expected = layer.norm2(h + layer.ff(h))
        out, _ = layer(x, mask=mask)
        layer.norm_first = not norm_first  # the other placement gives other numbers
        other, _ = layer(x, mask=mask)
    assert_close(out, expected, atol=1e-6)
    assert (other - expected).abs().max() > 0.1


@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_decoder_layer_norm_placement(norm_first: bool):
    torch.manual_seed(0)
    layer = prepare(DecoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first), seed=13).eval()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = key_mask(lengths_real(SRC_LENGTHS, S))

    def self_attend(h: Tensor) -> Tensor:
        return layer.self_attn(h, is_causal=True)[0]

    def cross_attend(h: Tensor) -> Tensor:
        return layer.cross_attn(h, memory, mask=memory_mask)[0]

    with torch.no_grad():
        if norm_first:
            h = x + self_attend(layer.norm1(x))
            h = h + cross_attend(layer.norm2(h))
            expected = h + layer.ff(layer.norm3(h))
        else:
            h = layer.norm1(x + self_attend(x))
            h = layer.norm2(h + cross_attend(h))
            expected = layer.norm3(h + layer.ff(h))
        out, _, _ = layer(x, memory, memory_mask=memory_mask)
        layer.norm_first = not norm_first
        other, _, _ = layer(x, memory, memory_mask=memory_mask)
    assert_close(out, expected, atol=1e-6)
    assert (other - expected).abs().max() > 0.1


@pytest.mark.parametrize("stack", [Encoder, Decoder])
def test_stack_final_norm_default_and_override(stack: type):
    for norm_first in (False, True):
        default = stack(2, D, H, FF, norm_first=norm_first)
        assert (default.norm is not None) is norm_first
        assert isinstance(
            stack(2, D, H, FF, norm_first=norm_first, final_norm=True).norm, nn.LayerNorm
        )
        assert stack(2, D, H, FF, norm_first=norm_first, final_norm=False).norm is None
    assert stack(2, D, H, FF, norm_first=True, layer_norm_eps=1e-3).norm.eps == 1e-3


def test_stack_is_its_layers_then_the_final_norm():
    torch.manual_seed(0)
    encoder = prepare(Encoder(3, D, H, FF, dropout=0.0, norm_first=True), seed=14).eval()
    x = torch.randn(B, S, D)
    mask = key_mask(lengths_real(SRC_LENGTHS, S))
    with torch.no_grad():
        h = x
        for layer in encoder.layers:
            h, _ = layer(h, mask=mask)
        out, _ = encoder(x, mask=mask)
    assert_close(out, encoder.norm(h), atol=1e-6)
    assert (encoder.norm(h) - h).abs().max() > 0.1  # the final norm does something


# -- FeedForward ------------------------------------------------------------------------------

REFERENCE_ACTIVATIONS = {
    "relu": lambda z: torch.where(z > 0, z, torch.zeros_like(z)),
    "gelu": lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))),
    "gelu_tanh": lambda z: (
        0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    ),
}


@pytest.mark.parametrize("activation", sorted(REFERENCE_ACTIVATIONS))
def test_feed_forward_is_linear_act_linear(activation: str):
    torch.manual_seed(0)
    ff = prepare(FeedForward(D, FF, activation=activation), seed=15)
    x = torch.randn(B, T, D)
    with torch.no_grad():
        h = x @ ff.linear1.weight.T + ff.linear1.bias
        expected = REFERENCE_ACTIVATIONS[activation](h) @ ff.linear2.weight.T + ff.linear2.bias
        assert_close(ff(x), expected, atol=1e-6)
        assert ff(x).shape == (B, T, D)


def test_feed_forward_gelu_variants_differ():
    torch.manual_seed(0)
    exact = prepare(FeedForward(D, FF, activation="gelu"), seed=16)
    tanh = FeedForward(D, FF, activation="gelu_tanh")
    tanh.load_state_dict(exact.state_dict())
    x = torch.randn(B, T, D) * 3
    with torch.no_grad():
        diff = (exact(x) - tanh(x)).abs().max()
    assert 1e-6 < diff < 1e-1  # the approximation is close but not the same function


def test_feed_forward_activation_dropout_only_in_training():
    """With linear2 the identity, the training output is act(linear1 x) with each element kept
    and scaled by 1 / (1 - p) or zeroed; in eval it is exactly act(linear1 x)."""
    torch.manual_seed(0)
    p = 0.5
    ff = FeedForward(D, D, activation="relu", activation_dropout=p)
    with torch.no_grad():
        ff.linear2.weight.copy_(torch.eye(D))
        ff.linear2.bias.zero_()
    x = torch.randn(4, 50, D)
    with torch.no_grad():
        clean = F.relu(ff.linear1(x))
        assert torch.equal(ff.eval()(x), ff(x))  # deterministic in eval
        assert_close(ff(x), clean, atol=1e-6)
        ff.train()
        noisy = ff(x)
    kept = noisy != 0
    positive = clean > 0
    assert_close(noisy[kept], clean[kept] / (1 - p), atol=1e-5)
    dropped = (positive & ~kept).sum() / positive.sum()
    assert 0.4 < dropped < 0.6  # about p of the active units are dropped
    no_dropout = FeedForward(D, D, activation_dropout=0.0).train()
    assert torch.equal(no_dropout(x), no_dropout.eval()(x))


# -- decoder without cross-attention -----------------------------------------------------------


def test_decoder_layer_without_cross_attention():
    torch.manual_seed(0)
    layer = DecoderLayer(D, H, FF, cross_attention=False, dropout=0.0).eval()
    assert layer.cross_attn is None and layer.norm2 is None and not layer.has_cross_attention
    names = {name.split(".")[0] for name in layer.state_dict()}
    assert names == {"self_attn", "norm1", "ff", "norm3"}
    x = torch.randn(B, T, D)
    with torch.no_grad():
        out, self_w, cross_w = layer(x, need_weights=True)
        h = layer.norm1(x + layer.self_attn(x, is_causal=True)[0])
        expected = layer.norm3(h + layer.ff(h))
    assert_close(out, expected, atol=1e-6)
    assert self_w.shape == (B, H, T, T) and cross_w is None
    with pytest.raises(ValueError, match=r"^memory: this layer has no cross-attention"):
        layer(x, torch.randn(B, S, D))
    with pytest.raises(ValueError, match=r"^memory: this layer has no cross-attention"):
        layer(x, memory_mask=key_mask(lengths_real(SRC_LENGTHS, S)))


def test_cross_attention_layer_requires_memory():
    layer = DecoderLayer(D, H, FF)
    with pytest.raises(ValueError, match=r"^memory: required"):
        layer(torch.randn(B, T, D))
    with pytest.raises(ValueError, match=r"^memory: expected shape \(B, T, d_model=16\)"):
        layer(torch.randn(B, T, D), torch.randn(B, S, D + 1))
    stack = Decoder(2, D, H, FF)
    with pytest.raises(ValueError, match=r"^memory: required"):
        stack(torch.randn(B, T, D))


def test_decoder_stack_without_cross_attention_returns_no_cross_weights():
    stack = Decoder(2, D, H, FF, cross_attention=False).eval()
    with torch.no_grad():
        out, self_w, cross_w = stack(torch.randn(B, T, D), need_weights=True)
    assert out.shape == (B, T, D)
    assert len(self_w) == 2 and cross_w is None


# -- need_weights ------------------------------------------------------------------------------


def _assert_rows_are_distributions(weights: Tensor, allowed: Tensor) -> None:
    """Each row sums to 1 over the allowed keys (1e-6); blocked entries are exactly 0."""
    assert torch.all(weights[~allowed.expand_as(weights)] == 0)
    assert torch.all(weights >= 0)
    sums = weights.sum(-1)
    assert_close(sums, torch.ones_like(sums), atol=1e-6)


def test_encoder_need_weights():
    torch.manual_seed(0)
    encoder = prepare(Encoder(2, D, H, FF, norm_first=True), seed=17).eval()
    x = torch.randn(B, S, D)
    real = lengths_real(SRC_LENGTHS, S)
    with torch.no_grad():
        out, weights = encoder(x, mask=key_mask(real), need_weights=True)
        plain, none = encoder(x, mask=key_mask(real))
    assert none is None
    assert_close(out, plain)  # the explicit path computes the same numbers as the fast one
    assert len(weights) == 2
    for w in weights:
        assert w.shape == (B, H, S, S)
        _assert_rows_are_distributions(w, key_mask(real))


def test_decoder_need_weights():
    torch.manual_seed(0)
    decoder = prepare(Decoder(2, D, H, FF), seed=18).eval()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    src_real, tgt_real = lengths_real(SRC_LENGTHS, S), lengths_real(TGT_LENGTHS, T)
    self_mask, memory_mask = key_mask(tgt_real), key_mask(src_real)
    with torch.no_grad():
        out, self_w, cross_w = decoder(
            x, memory, self_mask=self_mask, memory_mask=memory_mask, need_weights=True
        )
        plain, _, _ = decoder(x, memory, self_mask=self_mask, memory_mask=memory_mask)
    assert_close(out, plain)
    assert len(self_w) == len(cross_w) == 2
    upper = ~causal_mask(T)
    for w_self, w_cross in zip(self_w, cross_w, strict=True):
        assert w_self.shape == (B, H, T, T)
        assert w_cross.shape == (B, H, T, S)
        assert torch.all(w_self[..., upper] == 0)  # the causal upper triangle, exactly
        _assert_rows_are_distributions(w_self, causal_mask(T) & self_mask)
        _assert_rows_are_distributions(w_cross, memory_mask)
        diagonal = w_self[..., torch.arange(T), torch.arange(T)]  # (B, H, T)
        assert torch.all(diagonal[tgt_real[:, None, :].expand_as(diagonal)] > 0)  # itself


# -- bad arguments ---------------------------------------------------------------------------

BAD = [
    (
        "encoder-x-d_model",
        lambda: EncoderLayer(D, H, FF)(torch.randn(2, 3, D + 1)),
        ValueError,
        r"^x: expected shape \(B, T, d_model=16\), got \(2, 3, 17\)",
    ),
    (
        "encoder-x-2d",
        lambda: EncoderLayer(D, H, FF)(torch.randn(3, D)),
        ValueError,
        r"^x: expected shape \(B, T, d_model=16\), got \(3, 16\)",
    ),
    (
        "decoder-x-d_model",
        lambda: DecoderLayer(D, H, FF)(torch.randn(2, 3, 8), torch.randn(2, 3, D)),
        ValueError,
        r"^x: expected shape \(B, T, d_model=16\), got \(2, 3, 8\)",
    ),
    (
        "stack-x-d_model",
        lambda: Encoder(2, D, H, FF)(torch.randn(2, 3, 8)),
        ValueError,
        r"^x: expected shape",
    ),
    (
        "dropout-one",
        lambda: EncoderLayer(D, H, FF, dropout=1.0),
        ValueError,
        r"^dropout: expected a number in \[0, 1\), got 1\.0",
    ),
    (
        "dropout-negative",
        lambda: DecoderLayer(D, H, FF, dropout=-0.1),
        ValueError,
        r"^dropout: expected a number in \[0, 1\)",
    ),
    ("dropout-bool", lambda: EncoderLayer(D, H, FF, dropout=True), ValueError, r"^dropout:"),
    (
        "attention_dropout",
        lambda: EncoderLayer(D, H, FF, attention_dropout=1.5),
        ValueError,
        r"^attention_dropout: expected a number in \[0, 1\)",
    ),
    (
        "activation_dropout",
        lambda: FeedForward(D, FF, activation_dropout=1.0),
        ValueError,
        r"^activation_dropout: expected a number in \[0, 1\)",
    ),
    (
        "activation-unknown",
        lambda: EncoderLayer(D, H, FF, activation="tanh"),
        ValueError,
        r"^activation: expected one of \['gelu', 'gelu_tanh', 'relu', 'silu'\], got 'tanh'",
    ),
    (
        "ff-activation-unknown",
        lambda: FeedForward(D, FF, activation="tanh"),
        ValueError,
        r"^activation: expected one of",
    ),
    (
        "layer_norm_eps-zero",
        lambda: EncoderLayer(D, H, FF, layer_norm_eps=0.0),
        ValueError,
        r"^layer_norm_eps: expected a positive number, got 0\.0",
    ),
    (
        "layer_norm_eps-nan",
        lambda: DecoderLayer(D, H, FF, layer_norm_eps=float("nan")),
        ValueError,
        r"^layer_norm_eps: expected a positive number",
    ),
    (
        "layer_norm_eps-str",
        lambda: EncoderLayer(D, H, FF, layer_norm_eps="1e-5"),
        ValueError,
        r"^layer_norm_eps:",
    ),
    (
        "d_model-not-divisible",
        lambda: EncoderLayer(10, 4, FF),
        ValueError,
        r"^d_model: 10 is not divisible by num_heads=4",
    ),
    (
        "d_model-not-divisible-decoder",
        lambda: DecoderLayer(10, 3, FF),
        ValueError,
        r"^d_model: 10 is not divisible by num_heads=3",
    ),
    ("d_ff-zero", lambda: FeedForward(D, 0), ValueError, r"^d_ff: expected a positive int, got 0"),
    (
        "num_layers-zero",
        lambda: Encoder(0, D, H, FF),
        ValueError,
        r"^num_layers: expected a positive int, got 0",
    ),
    (
        "norm_first-int",
        lambda: EncoderLayer(D, H, FF, norm_first=1),
        TypeError,
        r"^norm_first: expected a bool, got 1",
    ),
    (
        "encoder-layer-from-decoder-layer",
        lambda: EncoderLayer.from_torch(nn.TransformerDecoderLayer(D, H, FF)),
        TypeError,
        r"^layer: expected torch.nn.TransformerEncoderLayer, got TransformerDecoderLayer",
    ),
    (
        "decoder-layer-from-linear",
        lambda: DecoderLayer.from_torch(nn.Linear(D, D)),
        TypeError,
        r"^layer: expected torch.nn.TransformerDecoderLayer, got Linear",
    ),
    (
        "encoder-from-layer",
        lambda: Encoder.from_torch(nn.TransformerEncoderLayer(D, H, FF)),
        TypeError,
        r"^stack: expected torch.nn.TransformerEncoder, got TransformerEncoderLayer",
    ),
    (
        "decoder-from-transformer",
        lambda: Decoder.from_torch(quietly(nn.Transformer, D, H, 1, 1, FF)),
        TypeError,
        r"^stack: expected torch.nn.TransformerDecoder, got Transformer",
    ),
    (
        "from_torch-silu",
        lambda: EncoderLayer.from_torch(nn.TransformerEncoderLayer(D, H, FF, activation=F.silu)),
        ValueError,
        r"^layer.activation: .* has no attnlab equivalent",
    ),
    (
        "from_torch-layernorm-without-bias",
        lambda: EncoderLayer.from_torch(nn.TransformerEncoderLayer(D, H, FF, bias=False)),
        ValueError,
        r"^layer.norm1: LayerNorm without bias has no attnlab equivalent",
    ),
    (
        "from_torch-stack-norm-not-layernorm",
        lambda: Encoder.from_torch(
            quietly(
                nn.TransformerEncoder, nn.TransformerEncoderLayer(D, H, FF), 2, norm=nn.Identity()
            )
        ),
        ValueError,
        r"^norm: .* has no attnlab equivalent",
    ),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_arguments_raise_naming_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert type(info.value) is exc


def test_from_torch_stack_with_differing_layers_is_refused():
    ref = quietly(nn.TransformerEncoder, nn.TransformerEncoderLayer(D, H, FF), 2)
    ref.layers[1] = nn.TransformerEncoderLayer(D, H, FF, activation="gelu")
    with pytest.raises(ValueError, match=r"^stack: the torch stack's layers differ"):
        Encoder.from_torch(ref)


def test_the_config_names_exactly_the_activations_the_network_has():
    """TransformerConfig checks ``activation`` against the names the feed-forward network maps
    to functions: the two lists are one."""
    from attnlab.models.config import ACTIVATIONS as NAMES
    from attnlab.nn.layers import ACTIVATIONS

    assert tuple(ACTIVATIONS) == NAMES
