"""attnlab export: the exported models run in CTranslate2 and Hugging Face transformers with
attnlab's outputs.

Two models: the session's trained numbers model (exported through the real CLI) and a random
model of the ``small`` preset's shape (through the Python API). On the same sources, in padded
batches, greedy search gives the same tokens in all three engines; beam search too where the
length penalties coincide (alpha = 0 = length_penalty); teacher-forced log-probabilities agree
to 1e-4 in float32. Options the targets cannot express, a missing tokenizer, an existing output
directory and a bad --to are one-line errors, and nothing is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab import Transformer, TransformerConfig, beam_search, greedy_search
from attnlab import formats as ex
from attnlab.cli import main
from attnlab.data.tokenizer import Tokenizer, load_tokenizers, save_tokenizers
from attnlab.decode.options import DecodingOptions
from attnlab.formats import ctranslate2 as ct2
from attnlab.formats import marian
from attnlab.formats.common import TARGET_NAMES
from attnlab.inference.translator import Translator

#: Every test here runs CTranslate2 or transformers on exported models (about a minute on an
#: idle 2-core machine): in `make test`, not in the edit loop's `make test-fast`.
pytestmark = pytest.mark.slow

ctranslate2 = pytest.importorskip("ctranslate2")
transformers = pytest.importorskip("transformers")

LOG_PROB_TOLERANCE = 1e-4  # float32, through three engines' kernels
MAX_NEW = 24  # every engine stops at the same length

NUMBER_SOURCES = [
    "seven",
    "three hundred and forty-two",
    "nine hundred and ninety-nine",
    "twelve",
    "one hundred",
    "five hundred and sixty-one",
    "eighty-eight",
    "two hundred and three",
    "zero",
]
SMALL_SOURCES = [
    "Two men are outside.",
    "A dog runs through the park with a red ball in its mouth.",
    "Zwei Männer schlafen.",
    "hello",
    "Eine Frau spielt Geige auf der Straße, während Kinder zuhören.",
    "The <eos> is text here",
    "ok",
    "Ein Hund springt über den Zaun.",
]
TOKENIZER_TEXTS = [
    "Two men are outside near a white house.",
    "A dog runs through the green park with a ball.",
    "Zwei Männer stehen vor einem weißen Haus.",
    "Ein Hund rennt mit einem Ball durch den grünen Park.",
    "A woman plays the violin in the street while children listen.",
    "Eine Frau spielt auf der Straße Geige, während Kinder zuhören.",
    "hello world, hallo Welt!",
] * 4


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def numbers(numbers_model_dir: Path):
    model = attnlab.load_pretrained(numbers_model_dir).eval()
    tokenizer, _ = load_tokenizers(numbers_model_dir)
    return model, tokenizer, numbers_model_dir


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(TOKENIZER_TEXTS, vocab_size=500)


@pytest.fixture(scope="module")
def small(tokenizer: Tokenizer) -> Transformer:
    """A random model of the `small` preset's shape (d_model 256, 4 heads, 3 + 3 layers)."""
    torch.manual_seed(0)
    config = TransformerConfig.preset("small", vocab_size=tokenizer.vocab_size, dropout=0.0)
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def numbers_ct2(numbers, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("numbers-ct2") / "ct2"
    _cli_ok(["export", "--model", str(numbers[2]), "--out", str(out), "--to", "ctranslate2"])
    return out


@pytest.fixture(scope="module")
def numbers_hf(numbers, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("numbers-hf") / "hf"
    _cli_ok(["export", "--model", str(numbers[2]), "--out", str(out), "--to", "huggingface"])
    return out


@pytest.fixture(scope="module")
def small_ct2(small, tokenizer, tmp_path_factory) -> Path:
    return ex.to_ctranslate2(small, tokenizer, tmp_path_factory.mktemp("small-ct2") / "ct2")


@pytest.fixture(scope="module")
def small_hf(small, tokenizer, tmp_path_factory) -> Path:
    return ex.to_huggingface(small, tokenizer, tmp_path_factory.mktemp("small-hf") / "hf")


def _cli_ok(argv: list[str]) -> None:
    assert main(argv) == 0


# -- the three engines -------------------------------------------------------------------------


def _source_ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [tokenizer.encode(t) for t in texts]


def _tokens(tokenizer: Tokenizer, rows: list[list[int]]) -> list[list[str]]:
    return [[tokenizer.backend.id_to_token(i) for i in row] for row in rows]


def _banned(model: Transformer, tokenizer: Tokenizer) -> list[list[str]]:
    """What attnlab never generates (pad and BOS), as CTranslate2 token sequences."""
    c = model.config
    return [[tokenizer.backend.id_to_token(i)] for i in sorted({c.pad_id, c.bos_id} - {c.eos_id})]


def ct2_search(directory: Path, model, tokenizer, ids, *, beam: int, **options) -> list[list[int]]:
    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=1, **options)
    results = translator.translate_batch(
        _tokens(tokenizer, ids),
        beam_size=beam,
        length_penalty=0.0,
        min_decoding_length=0,
        max_decoding_length=MAX_NEW,
        suppress_sequences=_banned(model, tokenizer),
    )
    return [[tokenizer.backend.token_to_id(t) for t in r.hypotheses[0]] for r in results]


def _hf_inputs(model, ids: list[list[int]]) -> dict[str, torch.Tensor]:
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), model.config.pad_id)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = torch.tensor(row)
    return {"input_ids": input_ids, "attention_mask": input_ids != model.config.pad_id}


def _strip(model, rows: list[list[int]]) -> list[list[int]]:
    """transformers' outputs as attnlab's: no decoder start, nothing from EOS on."""
    c, out = model.config, []
    for row in rows:
        row = row[1:]
        out.append(row[: row.index(c.eos_id)] if c.eos_id in row else row)
    return out


def hf_search(hf_model, model, ids, *, beam: int) -> list[list[int]]:
    with torch.no_grad():
        generated = hf_model.generate(
            **_hf_inputs(model, ids),
            num_beams=beam,
            do_sample=False,
            length_penalty=0.0,
            early_stopping="never",
            max_new_tokens=MAX_NEW,
        )
    return _strip(model, generated.tolist())


def attnlab_search(model, ids, *, beam: int) -> list[list[int]]:
    if beam == 1:
        return greedy_search(model, ids, max_new_tokens=MAX_NEW).tolist()
    return beam_search(model, ids, beam_size=beam, alpha=0.0, max_new_tokens=MAX_NEW).tolist()


def _load_hf(directory: Path):
    hf_model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        directory, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert type(hf_model).__name__ == "MarianMTModel"
    return hf_model.eval()


def _teacher_forced(model, ids, targets):
    """attnlab's log-probabilities ``(B, T, V)`` of the framed targets ``[bos] + t`` (each
    predicting ``t + [eos]``), with the decoder inputs and a mask of real positions."""
    c = model.config
    inputs = _hf_inputs(model, ids)["input_ids"]
    framed = [[c.bos_id, *t] for t in targets]
    width = max(map(len, framed))
    decoder = torch.full((len(framed), width), c.pad_id)
    for i, row in enumerate(framed):
        decoder[i, : len(row)] = torch.tensor(row)
    with torch.no_grad():
        log_probs = torch.log_softmax(model(inputs, decoder).float(), dim=-1)
    return log_probs, inputs, decoder, decoder != c.pad_id


# -- CTranslate2 -------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["numbers", "small"])
def test_ctranslate2_greedy_is_attnlab_greedy(which, request):
    model, tokenizer, directory, texts = _case(which, request, "ct2")
    ids = _source_ids(tokenizer, texts)
    expected = attnlab_search(model, ids, beam=1)
    assert ct2_search(directory, model, tokenizer, ids, beam=1) == expected
    if which == "numbers":  # the trained model ends outputs with EOS: not all cut at MAX_NEW
        assert any(len(row) < MAX_NEW for row in expected)


@pytest.mark.parametrize("which", ["numbers", "small"])
def test_ctranslate2_teacher_forced_log_probs(which, request):
    model, tokenizer, directory, texts = _case(which, request, "ct2")
    ids = _source_ids(tokenizer, texts)
    targets = [row[:10] for row in attnlab_search(model, ids, beam=1)]
    ours, _, _, _ = _teacher_forced(model, ids, targets)
    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)
    scored = translator.score_batch(_tokens(tokenizer, ids), _tokens(tokenizer, targets))
    eos = model.config.eos_id
    for row, (target, result) in enumerate(zip(targets, scored, strict=True)):
        expected = ours[row, torch.arange(len(target) + 1), torch.tensor([*target, eos])]
        assert len(result.log_probs) == len(target) + 1
        diff = (torch.tensor(result.log_probs) - expected).abs().max().item()
        assert diff < LOG_PROB_TOLERANCE, (row, diff)


def test_ctranslate2_beam_search_without_length_penalty(numbers, numbers_ct2):
    """attnlab with alpha=0 and CTranslate2 with length_penalty=0 both rank by log P, extend
    the same beams, and stop once the best-ranked candidate has ended (no live hypothesis can
    then overtake it): the same outputs, but where two candidates are within the rounding of
    CTranslate2 renormalising after removing pad and BOS (attnlab removes them after)."""
    model, tokenizer, _ = numbers
    ids = _source_ids(tokenizer, NUMBER_SOURCES)
    for beam in (2, 4, 5):
        ours = attnlab_search(model, ids, beam=beam)
        theirs = ct2_search(numbers_ct2, model, tokenizer, ids, beam=beam)
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if a != b:
                gap = _log_p(model, ids[i], a) - _log_p(model, ids[i], b)
                assert abs(gap) < 1e-3, (beam, i, gap)


def _log_p(model, source: list[int], output: list[int]) -> float:
    """attnlab's log P of a decoded output (EOS included where it ended before MAX_NEW)."""
    target = output if len(output) == MAX_NEW else [*output, model.config.eos_id]
    log_probs, _, _, _ = _teacher_forced(model, [source], [target[:-1]])
    return log_probs[0, torch.arange(len(target)), torch.tensor(target)].sum().item()


def test_ctranslate2_directory(numbers, numbers_ct2):
    model, tokenizer, _ = numbers
    names = {p.name for p in numbers_ct2.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "README.md"} <= names
    assert "tokenizer.json" in names  # attnlab's tokenizer travels with the model
    vocabulary = json.loads((numbers_ct2 / "shared_vocabulary.json").read_text("utf-8"))
    assert vocabulary == [tokenizer.backend.id_to_token(i) for i in range(tokenizer.vocab_size)]
    config = json.loads((numbers_ct2 / "config.json").read_text("utf-8"))
    assert config["decoder_start_token"] == vocabulary[model.config.bos_id] == config["bos_token"]
    assert config["eos_token"] == vocabulary[model.config.eos_id]
    assert config["layer_norm_epsilon"] == pytest.approx(model.config.layer_norm_eps)
    assert not config["add_source_bos"] and not config["add_source_eos"]
    readme = (numbers_ct2 / "README.md").read_text("utf-8")
    assert "ctranslate2.Translator" in readme and "length_penalty" in readme
    assert not list(numbers_ct2.parent.glob(".*"))  # no temporary left beside it


def test_ctranslate2_int8_loads_and_translates(numbers, numbers_ct2, tmp_path):
    """int8 weights: a quarter of the bytes, and the same model within rounding: the mean
    log-probability per token of attnlab's outputs moves by a fraction of a nat (a broken
    export moves it by several)."""
    model, tokenizer, directory = numbers
    out = tmp_path / "int8"
    argv = ["export", "--model", str(directory), "--out", str(out), "--to", "ctranslate2"]
    _cli_ok([*argv, "--quantize", "int8"])
    assert (out / "model.bin").stat().st_size < (numbers_ct2 / "model.bin").stat().st_size / 2
    ids = _source_ids(tokenizer, NUMBER_SOURCES)
    quantized = ct2_search(out, model, tokenizer, ids, beam=1, compute_type="int8")
    assert all(0 < len(row) <= MAX_NEW for row in quantized)
    outputs = _tokens(tokenizer, attnlab_search(model, ids, beam=1))
    sources = _tokens(tokenizer, ids)
    scores = {}
    for name, path, kind in (("float32", numbers_ct2, "default"), ("int8", out, "int8")):
        translator = ctranslate2.Translator(str(path), compute_type=kind, intra_threads=1)
        results = translator.score_batch(sources, outputs)
        scores[name] = torch.tensor([sum(r.log_probs) / len(r.log_probs) for r in results])
    change = (scores["int8"] - scores["float32"]).abs()
    assert change.mean().item() < 0.15 and change.max().item() < 0.5, change


@pytest.mark.parametrize(
    ("target", "quantization"),
    [
        ("ctranslate2", None),
        ("ctranslate2", "int8"),
        ("ctranslate2", "int8_float16"),
        ("huggingface", None),
    ],
)
def test_export_leaves_the_callers_model_unchanged(tokenizer, tmp_path, target, quantization):
    """CTranslate2 quantizes and fuses the arrays it is given in place: export hands it copies,
    so the model in memory is bit for bit what it was."""
    torch.manual_seed(1)
    config = TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0)
    model = Transformer(config).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    if target == "ctranslate2":
        ex.to_ctranslate2(model, tokenizer, tmp_path / "out", quantization=quantization)
    else:
        ex.to_huggingface(model, tokenizer, tmp_path / "out")
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed == []


def test_ctranslate2_expresses_the_other_options(tokenizer, tmp_path):
    """Pre-LN, grouped-query attention, GELU, learned and rotary positions, an embedding
    LayerNorm, no biases, unscaled and untied embeddings: CTranslate2 computes them all."""
    variants = [
        {"norm_first": True, "num_kv_heads": 2, "activation": "gelu", "positional": "learned"},
        {
            "positional": "rotary",
            "embedding_norm": True,
            "bias": False,
            "activation": "gelu_tanh",
            "scale_embeddings": False,
            "tie_output": False,
            "share_embeddings": False,
            "layer_norm_eps": 1e-6,
        },
    ]
    texts = SMALL_SOURCES[:4]
    ids = _source_ids(tokenizer, texts)
    for i, options in enumerate(variants):
        torch.manual_seed(i)
        config = TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, **options)
        model = Transformer(config).eval()
        out = ex.to_ctranslate2(model, tokenizer, tmp_path / f"variant{i}")
        expected = attnlab_search(model, ids, beam=1)
        assert ct2_search(out, model, tokenizer, ids, beam=1) == expected, options
        targets = [row[:6] for row in expected]
        ours, _, _, _ = _teacher_forced(model, ids, targets)
        translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
        scored = translator.score_batch(_tokens(tokenizer, ids), _tokens(tokenizer, targets))
        for row, (target, result) in enumerate(zip(targets, scored, strict=True)):
            framed = torch.tensor([*target, config.eos_id])
            expected_lp = ours[row, torch.arange(len(framed)), framed]
            diff = (torch.tensor(result.log_probs) - expected_lp).abs().max().item()
            assert diff < LOG_PROB_TOLERANCE, (options, row, diff)


# -- Hugging Face ------------------------------------------------------------------------------


def test_marian_permutation_maps_attnlab_positions_to_marians():
    """Marian's table (sines, then cosines) is attnlab's (interleaved), permuted."""
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    for d_model in (8, 64, 256):
        marian = MarianSinusoidalPositionalEmbedding(50, d_model).create_weight()
        ours = attnlab.nn.positional.sinusoidal_table(50, d_model).float()
        assert torch.equal(ours[:, ex.marian_permutation(d_model)], marian)


@pytest.mark.parametrize("which", ["numbers", "small"])
def test_huggingface_greedy_and_beam_are_attnlab(which, request):
    model, tokenizer, directory, texts = _case(which, request, "hf")
    hf_model = _load_hf(directory)
    ids = _source_ids(tokenizer, texts)
    for beam in (1, 4):
        assert hf_search(hf_model, model, ids, beam=beam) == attnlab_search(model, ids, beam=beam)


@pytest.mark.parametrize("which", ["numbers", "small"])
def test_huggingface_teacher_forced_log_probs(which, request):
    """Every log-probability of the vocabulary at every real position, to 1e-4."""
    model, tokenizer, directory, texts = _case(which, request, "hf")
    hf_model = _load_hf(directory)
    ids = _source_ids(tokenizer, texts)
    targets = [row[:10] for row in attnlab_search(model, ids, beam=1)]
    ours, inputs, decoder, real = _teacher_forced(model, ids, targets)
    with torch.no_grad():
        logits = hf_model(
            input_ids=inputs,
            attention_mask=inputs != model.config.pad_id,
            decoder_input_ids=decoder,
        ).logits
    theirs = torch.log_softmax(logits.float(), dim=-1)
    assert (theirs - ours).abs()[real].max().item() < LOG_PROB_TOLERANCE


def test_huggingface_round_trip_keeps_the_function(numbers, numbers_hf, tmp_path):
    """Marian recomputes its position table on every load: save_pretrained and reload."""
    model, tokenizer, _ = numbers
    ids = _source_ids(tokenizer, NUMBER_SOURCES)
    inputs = _hf_inputs(model, ids)
    decoder = torch.tensor([[model.config.bos_id, *ids[1][:5]]] * len(ids))
    first = _load_hf(numbers_hf)
    first.save_pretrained(tmp_path / "again")
    second = _load_hf(tmp_path / "again")
    with torch.no_grad():
        a = first(**inputs, decoder_input_ids=decoder).logits
        b = second(**inputs, decoder_input_ids=decoder).logits
    assert torch.equal(a, b)


def test_huggingface_tokenizer_is_attnlabs(tokenizer, small_hf):
    fast = transformers.AutoTokenizer.from_pretrained(small_hf)
    texts = [*SMALL_SOURCES, "  spaces  and\ttabs ", "Ünïcödé ✓ 日本", "<bos> <pad> <unk>"]
    batch = fast(texts, padding=True)
    for text, row, mask in zip(texts, batch["input_ids"], batch["attention_mask"], strict=True):
        ids = [i for i, m in zip(row, mask, strict=True) if m]
        assert ids == tokenizer.encode(text)  # no BOS / EOS on a source, as attnlab
        assert fast.decode(ids, skip_special_tokens=True) == tokenizer.decode(ids)
    assert (fast.pad_token_id, fast.eos_token_id, fast.bos_token_id) == (0, 2, 1)


def test_huggingface_translates_text_as_attnlab(numbers, numbers_hf):
    """What transformers' translation pipeline did (transformers 5 removed the task): the
    fast tokenizer, generate and decode, from the directory alone, offline."""
    model, tokenizer, _ = numbers
    fast = transformers.AutoTokenizer.from_pretrained(numbers_hf)
    hf_model = _load_hf(numbers_hf)
    with torch.no_grad():
        generated = hf_model.generate(
            **fast(NUMBER_SOURCES, return_tensors="pt", padding=True), num_beams=1
        )
    texts = fast.batch_decode(generated, skip_special_tokens=True)
    translator = Translator(model, tokenizer, tokenizer, decoding=DecodingOptions(beam_size=1))
    assert texts == translator.translate(NUMBER_SOURCES)
    generation = json.loads((numbers_hf / "generation_config.json").read_text("utf-8"))
    c = model.config
    assert generation["decoder_start_token_id"] == c.bos_id
    assert generation["suppress_tokens"] == [c.pad_id, c.bos_id]


def test_exports_carry_the_models_own_decoding(numbers, numbers_hf, numbers_ct2, tmp_path):
    """The generation config and the CTranslate2 README hold the model's decoding (its
    recipe's [eval]: greedy for the numbers recipe), not the paper's beam 4 and alpha 0.6;
    a directory that carries another one exports that one."""
    from attnlab.decode.options import DecodingOptions

    own = DecodingOptions.carried_by(numbers[2])[0]
    assert own.beam_size == 1  # the numbers recipe decodes greedily
    generation = json.loads((numbers_hf / "generation_config.json").read_text("utf-8"))
    assert (generation["num_beams"], generation["length_penalty"]) == (1, own.alpha)
    assert "beam_size=1," in (numbers_ct2 / "README.md").read_text("utf-8")
    other = tmp_path / "model"
    shutil.copytree(numbers[2], other)
    job = json.loads((other / "job.json").read_text("utf-8"))
    job["eval"] = {**job.get("eval", {}), "beam_size": 6, "alpha": 1.1}
    (other / "job.json").write_text(json.dumps(job), "utf-8")
    out = tmp_path / "hf"
    _cli_ok(["export", "--model", str(other), "--out", str(out), "--to", "huggingface"])
    generation = json.loads((out / "generation_config.json").read_text("utf-8"))
    assert (generation["num_beams"], generation["length_penalty"]) == (6, 1.1)


def test_huggingface_expresses_gqa_gelu_no_bias_untied(tokenizer, tmp_path):
    torch.manual_seed(3)
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        num_kv_heads=2,
        activation="gelu_tanh",
        bias=False,
        scale_embeddings=False,
        tie_output=False,
        share_embeddings=False,
    )
    model = Transformer(config).eval()
    hf_model = _load_hf(ex.to_huggingface(model, tokenizer, tmp_path / "hf"))
    ids = _source_ids(tokenizer, SMALL_SOURCES[:4])
    expected = attnlab_search(model, ids, beam=1)
    assert hf_search(hf_model, model, ids, beam=1) == expected
    ours, inputs, decoder, real = _teacher_forced(model, ids, [row[:6] for row in expected])
    with torch.no_grad():
        logits = hf_model(
            input_ids=inputs, attention_mask=inputs != config.pad_id, decoder_input_ids=decoder
        ).logits
    assert (torch.log_softmax(logits, -1) - ours).abs()[real].max().item() < LOG_PROB_TOLERANCE


def _case(which: str, request, target: str):
    """(model, tokenizer, exported directory, sources) of the numbers or the small model."""
    if which == "numbers":
        model, tokenizer, _ = request.getfixturevalue("numbers")
        return model, tokenizer, request.getfixturevalue(f"numbers_{target}"), NUMBER_SOURCES
    model, tokenizer = request.getfixturevalue("small"), request.getfixturevalue("tokenizer")
    return model, tokenizer, request.getfixturevalue(f"small_{target}"), SMALL_SOURCES


# -- what cannot be exported, and bad input ----------------------------------------------------


@pytest.mark.parametrize(
    ("options", "target", "named"),
    [
        ({"positional": "alibi"}, "ctranslate2", "positional='alibi'"),
        ({"positional": "rotary"}, "huggingface", "positional='rotary'"),
        ({"positional": "learned"}, "huggingface", "positional='learned'"),
        ({"positional": "none"}, "huggingface", "positional='none'"),
        ({"norm_first": True}, "huggingface", "norm_first=True"),
        ({"embedding_norm": True}, "huggingface", "embedding_norm=True"),
        ({"layer_norm_eps": 1e-6}, "huggingface", "layer_norm_eps=1e-06"),
    ],
)
def test_unsupported_options_are_named(options, target, named):
    model = Transformer(TransformerConfig.preset("tiny", **options))
    reasons = ex.unsupported(model, target)
    assert len(reasons) == 1 and reasons[0].startswith(named)
    assert TARGET_NAMES[target] in reasons[0]


@pytest.mark.parametrize(
    ("target", "options"),
    [
        ("ctranslate2", {"norm_first": True, "num_kv_heads": 2, "positional": "learned"}),
        ("ctranslate2", {"positional": "rotary", "embedding_norm": True, "bias": False}),
        ("ctranslate2", {"positional": "none", "layer_norm_eps": 1e-6, "activation": "gelu"}),
        ("huggingface", {"num_kv_heads": 1, "activation": "gelu", "bias": False}),
        ("huggingface", {"scale_embeddings": False, "tie_output": False}),
        ("huggingface", {"share_embeddings": False, "activation": "gelu_tanh"}),
    ],
)
def test_what_each_target_expresses(target, options):
    assert ex.unsupported(Transformer(TransformerConfig.preset("tiny", **options)), target) == []


@pytest.fixture()
def model_dir(tmp_path, tokenizer):
    """Write a tiny model directory with ``options``; returns a function of the options."""

    def write(name: str = "model", *, tokenizers: bool = True, model_type="transformer", **options):
        config = TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, **options)
        cls = {"transformer": Transformer, "lm": attnlab.TransformerLM}[model_type]
        directory = tmp_path / name
        cls(config).save_pretrained(directory)
        if tokenizers:
            save_tokenizers(directory, tokenizer)
        return directory

    return write


def _cli_error(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("attnlab export: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("options", "to", "named"),
    [
        ({"norm_first": True}, "huggingface", "norm_first=True"),
        ({"positional": "alibi"}, "ctranslate2", "positional='alibi'"),
        ({"model_type": "lm"}, "ctranslate2", "TransformerLM"),
    ],
)
def test_cli_refuses_what_the_target_cannot_express(
    model_dir, tmp_path, capsys, options, to, named
):
    out = tmp_path / "out"
    argv = ["export", "--model", str(model_dir(**options)), "--out", str(out), "--to", to]
    line = _cli_error(argv, capsys)
    assert named in line and TARGET_NAMES[to] in line
    assert not out.exists()


def test_cli_bad_input_is_one_line(model_dir, tmp_path, capsys):
    good = model_dir("good")
    out = tmp_path / "out"
    bare = model_dir("bare", tokenizers=False)
    line = _cli_error(
        ["export", "--model", str(bare), "--out", str(out), "--to", "ctranslate2"], capsys
    )
    assert "tokenizer.json" in line
    command = ["export", "--model", str(good), "--out", str(out)]
    assert "--to: expected one of ctranslate2, huggingface, got 'onnx'" in _cli_error(
        [*command, "--to", "onnx"], capsys
    )
    with pytest.raises(SystemExit) as stop:  # --to is required: argparse's usage error
        main(command)
    assert stop.value.code == 2 and "--to" in capsys.readouterr().err
    line = _cli_error([*command, "--to", "ctranslate2", "--quantize", "int3"], capsys)
    assert "--quantize: expected one of int8" in line
    line = _cli_error([*command, "--to", "huggingface", "--quantize", "int8"], capsys)
    assert "--quantize" in line
    missing = tmp_path / "missing"
    assert str(missing) in _cli_error(
        ["export", "--model", str(missing), "--out", str(out), "--to", "huggingface"], capsys
    )
    assert not out.exists()


def test_cli_existing_out_dir_needs_overwrite(model_dir, tmp_path, capsys):
    good, out = model_dir("good"), tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = _cli_error(
        ["export", "--model", str(good), "--out", str(out), "--to", "huggingface"], capsys
    )
    assert "already exists" in line and "--overwrite" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    command = ["export", "--model", str(good), "--out", str(out), "--to", "huggingface"]
    assert main([*command, "--overwrite"]) == 0
    assert f"wrote the huggingface model to {out}/" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file() and not (out / "keep.txt").exists()
    command = ["export", "--model", str(good), "--out", str(good), "--to", "ctranslate2"]
    line = _cli_error([*command, "--overwrite"], capsys)
    assert "is the model directory" in line


def test_two_vocabularies(tokenizer, tmp_path):
    """Separate source and target tokenizers: CTranslate2's own layout (and the same greedy
    tokens); transformers' fast tokenizer holds one vocabulary, so that export is refused."""
    other = Tokenizer.train(TOKENIZER_TEXTS[:3], vocab_size=300)
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=other.vocab_size,
        share_embeddings=False,
    )
    torch.manual_seed(4)
    model = Transformer(config).eval()
    with pytest.raises(TypeError, match="tokenizers: expected an attnlab Tokenizer"):
        ex.to_huggingface(model, ["not", "tokenizers"], tmp_path / "hf")
    with pytest.raises(ValueError, match="one tokenizer for both sides"):
        ex.to_huggingface(model, (tokenizer, other), tmp_path / "hf")
    with pytest.raises(ValueError, match="tokenizer: the source tokenizer has"):
        ex.to_ctranslate2(model, (other, other), tmp_path / "ct2")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "ct2").exists()
    out = ex.to_ctranslate2(model, (tokenizer, other), tmp_path / "ct2")
    names = {p.name for p in out.iterdir()}
    assert {"source_vocabulary.json", "target_vocabulary.json"} <= names
    assert {"src_tokenizer.json", "tgt_tokenizer.json"} <= names
    ids = _source_ids(tokenizer, SMALL_SOURCES[:4])
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    results = translator.translate_batch(
        _tokens(tokenizer, ids),
        beam_size=1,
        min_decoding_length=0,
        max_decoding_length=MAX_NEW,
        suppress_sequences=_banned(model, other),
    )
    theirs = [[other.backend.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    assert theirs == attnlab_search(model, ids, beam=1)


@pytest.mark.parametrize("target", ex.TARGETS)
def test_a_failure_midway_leaves_no_out_dir(monkeypatch, tokenizer, tmp_path, target):
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size))

    def fail(*args, **kwargs):
        raise RuntimeError("the disk caught fire")

    # the last step of each build: the files before it are already written
    if target == "huggingface":
        monkeypatch.setattr(marian, "_write_tokenizer", fail)
    else:
        monkeypatch.setattr(ct2, "_readme", fail)
    export = ex.to_huggingface if target == "huggingface" else ex.to_ctranslate2
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="caught fire"):
        export(model, tokenizer, out)
    assert list(tmp_path.iterdir()) == []  # neither out_dir nor a temporary
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="caught fire"):
        export(model, tokenizer, out, force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]  # the old one, intact
