"""FLOP accounting: closed forms, analytic == measured, the tutorial's head experiment, fvcore.

Counts are exact integers, so every comparison here is an equality.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import attnlab
from attnlab.cli import main
from attnlab.instruments import flops
from attnlab.instruments.flops import (
    Cost,
    attention_costs,
    compare_heads,
    measure,
    model_costs,
    table1,
)
from attnlab.models.transformer import TransformerConfig


def by_name(costs: list[Cost]) -> dict[str, Cost]:
    return {c.name: c for c in costs}


# -- closed forms ------------------------------------------------------------------------------


@pytest.mark.parametrize(("t_q", "t_k", "d", "h", "hk", "b"), [
    (7, 7, 64, 4, None, 1), (5, 9, 48, 6, 2, 3), (1, 30, 32, 8, 1, 2), (16, 16, 512, 8, 8, 4),
])  # fmt: skip
def test_attention_costs_closed_form(t_q, t_k, d, h, hk, b):
    kv = d // h * (hk or h)
    c = by_name(attention_costs(t_q, t_k, d, h, num_kv_heads=hk, batch=b))
    assert c["q_proj"].macs == b * t_q * d * d
    assert c["k_proj"].macs == c["v_proj"].macs == b * t_k * d * kv
    assert c["scores"].macs == c["weighted_sum"].macs == b * t_q * t_k * d
    assert c["out_proj"].macs == b * t_q * d * d
    assert c["softmax"].macs == 0 and c["softmax"].other_flops == 5 * b * h * t_q * t_k
    for cost in c.values():
        assert cost.flops == 2 * cost.macs
    # Backward: 2 products per product, and the fused kernel recomputes the scores.
    assert c["q_proj"].training_macs == 3 * c["q_proj"].macs
    assert c["scores"].training_macs == 4 * c["scores"].macs
    assert c["weighted_sum"].training_macs == 3 * c["weighted_sum"].macs


def test_attention_core_does_not_depend_on_the_head_count():
    core = {
        h: sum(c.macs for c in attention_costs(128, 128, 512, h) if c.name != "softmax")
        for h in (1, 2, 4, 8, 16, 32, 64)
    }
    assert len(set(core.values())) == 1


def test_options_leave_out_their_parts():
    names = [c.name for c in attention_costs(4, 6, 32, 4, project_kv=False)]
    assert "k_proj" not in names and "v_proj" not in names
    names = [c.name for c in attention_costs(4, 6, 32, 4, output_projection=False)]
    assert "out_proj" not in names
    explicit = by_name(attention_costs(4, 6, 32, 4, fused=False))
    assert explicit["scores"].training_macs == 3 * explicit["scores"].macs


def test_model_costs_closed_form_paper_base():
    c = TransformerConfig.preset("paper-base")
    n, d, f, v, layers = 64, 512, 2048, 37000, 6
    costs = model_costs(c, src_len=n, tgt_len=n)
    encoder = 4 * n * d * d + 2 * n * n * d + 2 * n * d * f
    decoder = 8 * n * d * d + 4 * n * n * d + 2 * n * d * f
    assert costs.macs == layers * (encoder + decoder) + n * d * v
    assert costs.flops == 2 * costs.macs
    assert costs.tokens == n
    assert costs.flops_per_token == costs.flops / n
    assert costs.other_flops == layers * 3 * 5 * 8 * n * n


def test_model_costs_model_types_and_lengths():
    c = TransformerConfig.preset("tiny")
    lm = model_costs(c, src_len=10, model_type="lm")
    assert not lm.encoder and len(lm.decoder) == 2
    assert all(not x.name.startswith("cross.") for x in lm.decoder[0])
    assert lm.logits.macs == 10 * 64 * 1000
    enc = model_costs(c, src_len=10, model_type="encoder")
    assert enc.logits is None and not enc.decoder and enc.tokens == 10
    tr = model_costs(c, src_len=10, tgt_len=3, batch=2)
    cross = by_name(tr.decoder[0])
    assert cross["cross.k_proj"].macs == 2 * 10 * 64 * 64  # keys from the 10 source positions
    assert cross["cross.scores"].macs == 2 * 3 * 10 * 64


def test_table1_rows_and_the_crossover_at_n_equals_d():
    d = 512
    for n in (16, 256, 511, 512, 513, 4096):
        rows = {r["layer"]: r for r in table1(n, d)}
        attention, recurrent = rows["self-attention"]["macs"], rows["recurrent"]["macs"]
        assert attention == 2 * n * n * d and recurrent == 2 * n * d * d
        assert (attention < recurrent) == (n < d) and (attention == recurrent) == (n == d)
        assert rows["convolutional (k=3)"]["macs"] == 3 * n * d * d
        assert rows["recurrent"]["sequential"] == n and rows["self-attention"]["max_path"] == 1


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda: attention_costs(0, 4, 32, 4), r"^t_q: expected a positive int"),
    (lambda: attention_costs(4, 4, 30, 4), r"^num_heads: 4 must divide d_model=30"),
    (lambda: attention_costs(4, 4, 32, 4, batch=0), r"^batch: expected a positive int"),
    (lambda: model_costs(TransformerConfig.preset("tiny"), src_len=0), r"^src_len: expected"),
    (lambda: model_costs(TransformerConfig.preset("tiny"), src_len=4, model_type="x"),
     r"^model_type: expected"),
    (lambda: table1(0, 8), r"^n: expected a positive int"),
    (lambda: compare_heads(2, 8, 30, 4, measured=False), r"^heads: 4 does not divide dim=30"),
])  # fmt: skip
def test_bad_arguments_name_themselves(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_model_costs_refuses_a_non_config():
    with pytest.raises(TypeError, match=r"^config: expected a TransformerConfig, got dict"):
        model_costs({}, src_len=3)


# -- analytic == measured ------------------------------------------------------------------------


def test_torch_counts_zero_for_cpu_flash_attention_and_attnlab_counts_it():
    """The gap this module fills: torch's counter has no formula for the CPU flash kernel."""
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(2, 4, 16, 8)
    with FlopCounterMode(display=False) as plain:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert plain.get_total_flops() == 0
    counted = measure(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert counted.flops == 2 * 2 * (2 * 4 * 16 * 16 * 8)
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in counted.by_operator


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
@pytest.mark.parametrize("cross", [False, True])
def test_attention_module_measured_equals_analytic(kv_heads, cross):
    torch.manual_seed(0)
    mha = attnlab.MultiHeadAttention(32, 4, num_kv_heads=kv_heads)
    x, memory = torch.randn(3, 5, 32), torch.randn(3, 9, 32)
    t_k = 9 if cross else 5
    costs = attention_costs(5, t_k, 32, 4, num_kv_heads=kv_heads, batch=3)
    with torch.no_grad():
        counted = measure(lambda: mha(x, memory if cross else None))
    assert counted.flops == sum(c.flops for c in costs)
    # Training: forward + backward of every product (the fused kernel recomputes the scores).
    # Every input needs its gradient, as in a model (memory comes from the encoder).
    xg, mg = x.clone().requires_grad_(), memory.clone().requires_grad_()
    counted = measure(lambda: mha(xg, mg if cross else None)[0].sum().backward())
    assert counted.flops == sum(c.training_flops for c in costs)


def test_explicit_path_measured_equals_analytic():
    """With the weights returned, attention is two plain matmuls: a 2x backward."""
    torch.manual_seed(0)
    mha = attnlab.MultiHeadAttention(32, 4)
    x = torch.randn(2, 6, 32, requires_grad=True)
    costs = attention_costs(6, 6, 32, 4, batch=2, fused=False)
    counted = measure(lambda: mha(x, need_weights=True)[0].sum().backward())
    assert counted.flops == sum(c.training_flops for c in costs)


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary", "alibi"])
@pytest.mark.parametrize("model_type", ["transformer", "lm", "encoder"])
def test_model_measured_equals_analytic_forward_and_training(model_type, positional):
    config = TransformerConfig.preset("tiny", positional=positional, dropout=0.0)
    cls = {"transformer": attnlab.Transformer, "lm": attnlab.TransformerLM}.get(
        model_type, attnlab.TransformerEncoder
    )
    torch.manual_seed(0)
    model = cls(config)
    src = torch.randint(3, 1000, (2, 7))
    tgt = torch.randint(3, 1000, (2, 4))

    def run():
        return model(src, tgt) if model_type == "transformer" else model(src)

    costs = model_costs(config, src_len=7, tgt_len=4, batch=2, model_type=model_type)
    with torch.no_grad():
        assert measure(run).flops == costs.flops
    assert measure(lambda: run().sum().backward()).flops == costs.training_flops


def test_feed_forward_measured_equals_analytic():
    ff = attnlab.FeedForward(16, 40)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        assert measure(lambda: ff(x)).flops == flops.feed_forward_cost(15, 16, 40).flops


# -- the tutorial's experiment -------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "seq", "dim", "heads"), [(2, 32, 64, 8), (1, 16, 48, 3)])
def test_compare_heads_difference_is_exactly_w_o(batch, seq, dim, heads):
    result = compare_heads(batch, seq, dim, heads)
    w_o = batch * seq * dim * dim
    assert result["w_o"] == {"macs": w_o, "flops": 2 * w_o}
    assert result["difference"] == result["w_o"]
    single = 3 * batch * seq * dim * dim + 2 * batch * seq * seq * dim
    assert result["single_head"]["macs"] == single
    assert result["multi_head"]["macs"] == single + w_o
    for key in ("single_head", "multi_head", "difference", "w_o"):
        assert result[key] == result["analytic"][key]  # measured == closed form


def test_cli_compare_heads_json(capsys):
    assert main(["flops", "--compare-heads", "--batch", "2", "--seq", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"single_head", "multi_head", "difference", "w_o"}
    for value in data.values():
        assert set(value) == {"macs", "flops"}
        assert value["flops"] == 2 * value["macs"]
    assert data["difference"] == data["w_o"] == {"macs": 2 * 64 * 512 * 512,
                                                  "flops": 4 * 64 * 512 * 512}  # fmt: skip


def test_cli_compare_heads_table(capsys):
    assert main(["flops", "--compare-heads", "--batch", "1", "--seq", "32", "--d-model", "64"]) == 0
    out = capsys.readouterr().out
    assert "The whole difference is W^O: yes" in out
    assert "Analytic closed forms agree with the count: yes" in out


def test_cli_flops_config_table_and_json(capsys):
    assert main(["flops", "--preset", "tiny", "--src-len", "12", "--measure"]) == 0
    out = capsys.readouterr().out
    assert "equal to the analytic" in out and "Table 1" in out
    assert main(["flops", "--preset", "tiny", "--src-len", "12", "--json", "--measure"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["measured_forward_flops"] == data["forward"]["flops"]
    assert data["encoder_layer"]["ffn"] == 2 * 12 * 64 * 256
    assert data["table1"][0]["layer"] == "self-attention"


def test_cli_flops_rejects_bad_numbers(capsys):
    with pytest.raises(SystemExit):
        main(["flops", "--compare-heads", "--seq", "0"])
    assert "expected a positive integer" in capsys.readouterr().err


# -- a second counter: fvcore --------------------------------------------------------------------


def _fvcore_sdpa(inputs, outputs):
    """fvcore has no rule for SDPA: MACs of Q K^T and A V from the traced shapes."""
    from fvcore.nn.jit_handles import get_shape

    q, k, v = (get_shape(x) for x in inputs[:3])
    b, h, t_q, d = q
    return b * h * t_q * k[2] * d + b * h * t_q * k[2] * v[3]


@pytest.mark.parametrize("heads", [1, 8])
def test_fvcore_counts_the_same_macs(heads):
    fvcore = pytest.importorskip("fvcore.nn")
    torch.manual_seed(0)
    module = attnlab.MultiHeadAttention(64, heads).eval()
    if heads == 1:
        module.out_proj = nn.Identity()  # the tutorial's single-head module
    x = torch.randn(2, 32, 64)
    analysis = fvcore.FlopCountAnalysis(module, (x,))
    analysis.set_op_handle("aten::scaled_dot_product_attention", _fvcore_sdpa)
    analysis.unsupported_ops_warnings(False)
    analysis.uncalled_modules_warnings(False)
    result = compare_heads(2, 32, 64, 8)
    key = "single_head" if heads == 1 else "multi_head"
    assert analysis.total() == result[key]["macs"]  # fvcore's "flops" are MACs
