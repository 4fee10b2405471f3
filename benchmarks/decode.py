"""Benchmark decoding: attnlab against CTranslate2 (the anchor) and torch.nn.Transformer.

What is measured (CPU, eval mode, no autograd): one model of the ``small`` preset's shape
(d_model 256, 4 heads, 3 + 3 post-LN layers, d_ff 1024, an 8,000-token shared embedding, the
paper's sinusoidal positions, tied output projection), random weights (seed 0), three ways:

* attnlab: :func:`attnlab.greedy_search` / :func:`attnlab.beam_search`, on the fast decoder
  step (:mod:`attnlab.decode.fast`), in float32 and with ``quantize="int8"``; at 1 thread also
  the readable reference path (``fast=False``), for the record.
* CTranslate2: the same model exported with :func:`attnlab.formats.to_ctranslate2` (float32, and
  ``quantization="int8"``), run by ``ctranslate2.Translator.translate_batch`` on the same
  source ids (as token strings), pad and BOS suppressed as attnlab bans them.
* torch: ``torch.nn.Transformer``'s stacks holding the same weights, without a cache (pytorch
  issues #107573, #49791): each step re-runs the decoder on the whole prefix; greedy rows only.

Rows, each forcing 128 new tokens (minimum = maximum length, so EOS never ends a row early)
from 32-token sources: greedy at batch 1, greedy at batch 32, beam 4 (length penalty 0.6 for
attnlab, 0 for CTranslate2: with every hypothesis the same length the penalties rank alike) at
batch 32. Tokens/s counts output tokens (batch x 128). Each row runs at 1 and at 2 threads
(``torch.set_num_threads``; CTranslate2's ``intra_threads``).

Outputs are checked before timing: attnlab float32 against CTranslate2 float32 and against
torch, row by row (identical token sequences; a beam row can differ where two hypotheses tie to
float32 rounding, which is reported); int8 outputs are compared with their engine's float32
ones (token agreement), since the two engines quantize differently.

Isolation and timing: every contender (engine x weight type x thread count) lives in its own
worker process, which builds its model once and times one run per request. The parent asks
the workers in turn, rotating the order each repetition, and pauses between runs, so that no
contender's threads run or spin while another is timed; medians are compared with medians,
and the spread (min, max) is reported. Warm-up runs come first.

What bounds each row comes from a torch.profiler trace of attnlab's run, float32 and int8 (the
shares of matrix products, attention, the search and of every other op; the ops per step; the
time per step outside any op, i.e. Python and dispatch; the mean time of a linear-map call),
with the weight bytes and FLOPs a token costs.

Run::

    .venv/bin/python benchmarks/decode.py            # full run (about 20 minutes on 2 busy cores)
    .venv/bin/python benchmarks/decode.py --quick    # smoke run (few tokens, small batch)
    .venv/bin/python benchmarks/decode.py --quality MODEL_DIR   # int8 against float32

``--quality MODEL_DIR`` measures what int8 costs in quality instead, on a model trained by
``attnlab train``: its task's test split translated in float32 and in int8, greedy and with
beam 4, scored (exact match, chrF, BLEU) with the time each took; it writes
``benchmarks/results/decode_int8_quality.json`` (or ``--out``).

It prints a table, a README-ready markdown table, and writes JSON (default
``benchmarks/results/decode.json``); the exit code is 0 unless ``--check`` is given and a
target is missed. Targets (``GOALS``), each engine at its best thread count: attnlab /
CTranslate2 float32 >= 1.5 for greedy batch 1, >= 1.2 for greedy batch 32, >= 1.5 for beam 4
batch 32; int8 against CTranslate2 int8 >= 1.0 at batch 1 and >= 1.2 at batch 32.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import attnlab
from attnlab.decode.options import DecodingOptions
from attnlab.nn.layers import Decoder, Encoder
from common import Row, check_target, cpu_model, finish, print_table

SEED = 0
VOCAB = 8000
D_MODEL, HEADS, LAYERS, D_FF = 256, 4, 3, 1024
SOURCE_LENGTH = 32
PAD, BOS = 0, 1
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "decode.json"
PAUSE_S = 0.2  # between timed runs: lets the last contender's OpenMP threads go to sleep
#: attnlab / CTranslate2 tokens per second, at least, at each engine's best thread count (the
#: goals of issue 28); rows not named here are informational.
GOALS = {
    ("greedy_B1", "fp32"): 1.5,
    ("greedy_B32", "fp32"): 1.2,
    ("beam4_B32", "fp32"): 1.5,
    ("greedy_B1", "int8"): 1.0,
    ("greedy_B32", "int8"): 1.2,
}


@dataclass(frozen=True)
class Case:
    key: str
    batch: int
    beam: int


@dataclass(frozen=True)
class Plan:
    new_tokens: int
    cases: tuple[Case, ...]
    threads: tuple[int, ...]
    reps: dict[int, int]  # repetitions per thread count
    warmup: int
    torch_max_batch: int  # torch (no cache) runs greedy rows up to this batch


FULL = Plan(
    new_tokens=128,
    cases=(Case("greedy_B1", 1, 1), Case("greedy_B32", 32, 1), Case("beam4_B32", 32, 4)),
    threads=(1, 2),
    reps={1: 5, 2: 5},
    warmup=1,
    torch_max_batch=32,
)
QUICK = Plan(
    new_tokens=12,
    cases=(Case("greedy_B1", 1, 1), Case("greedy_B4", 4, 1), Case("beam4_B4", 4, 4)),
    threads=(1,),
    reps={1: 1, 2: 1},
    warmup=0,
    torch_max_batch=4,
)

ENGINES = {
    "attnlab": "attnlab fp32",
    "attnlab-int8": "attnlab int8",
    "attnlab-reference": "attnlab fp32, reference path",
    "ct2": "CTranslate2 fp32",
    "ct2-int8": "CTranslate2 int8",
    "torch": "torch nn.Transformer (no cache)",
}


# -- the model, three ways -------------------------------------------------------------------


class TorchTwin(nn.Module):
    """torch.nn.TransformerEncoder / TransformerDecoder (no final norms: post-LN, as attnlab's
    preset) with attnlab's embedding scaling, sinusoidal table and tied output."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        nn.init.normal_(self.embed.weight, std=D_MODEL**-0.5)
        self.position = attnlab.SinusoidalPositionalEncoding(D_MODEL)
        layer = {"dropout": 0.0, "batch_first": True}
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, **layer),
            LAYERS,
            norm=None,
            enable_nested_tensor=False,
        )
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, **layer), LAYERS, norm=None
        )
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def embed_ids(self, ids: Tensor) -> Tensor:
        return self.position(self.embed(ids) * math.sqrt(D_MODEL))


def make_models() -> tuple[attnlab.Transformer, TorchTwin]:
    """attnlab's model and torch's, the same weights (attnlab's stacks copied from torch's)."""
    torch.manual_seed(SEED)
    theirs = TorchTwin().eval()
    config = attnlab.TransformerConfig.preset("small", vocab_size=VOCAB, dropout=0.0)
    ours = attnlab.Transformer(config)
    ours.encoder = Encoder.from_torch(theirs.encoder)
    ours.decoder = Decoder.from_torch(theirs.decoder)
    with torch.no_grad():
        ours.src_embed.token.weight.copy_(theirs.embed.weight)  # shared and tied
    return ours.eval(), theirs


def make_sources(batch: int) -> Tensor:
    gen = torch.Generator().manual_seed(SEED + batch)
    return torch.randint(4, VOCAB, (batch, SOURCE_LENGTH), generator=gen)


def make_tokenizer():
    """An 8,000-token attnlab tokenizer (BPE over pseudo-words), for the export only: the
    benchmark feeds ids, which CTranslate2 receives as these token strings."""
    from attnlab.data.tokenizer import Tokenizer

    rng = random.Random(SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(6000)]
    texts = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(4000)]
    tokenizer = Tokenizer.train(texts, vocab_size=VOCAB)
    if tokenizer.vocab_size != VOCAB:
        raise RuntimeError(f"the benchmark tokenizer has {tokenizer.vocab_size} tokens")
    return tokenizer


@torch.inference_mode()
def torch_greedy(model: TorchTwin, src: Tensor, new_tokens: int) -> Tensor:
    """Greedy decoding without a cache: the decoder re-runs the prefix at every step."""
    memory = model.encoder(model.embed_ids(src))
    ids = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(new_tokens):
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        y = model.decoder(model.embed_ids(ids), memory, tgt_mask=causal, tgt_is_causal=True)
        logits = model.head(y[:, -1]).float()
        logits[:, [PAD, BOS]] = -math.inf
        logits[:, 2] = -math.inf  # EOS: forced length
        ids = torch.cat([ids, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, 1:]


# -- workers: one contender per process ------------------------------------------------------


class Worker:
    """A contender in its own process: ``run(case)`` times one decode there."""

    def __init__(self, engine: str, threads: int, workdir: Path, new_tokens: int) -> None:
        self.engine, self.threads = engine, threads
        argv = [sys.executable, __file__, "--worker", engine, "--threads", str(threads)]
        argv += ["--workdir", str(workdir), "--new-tokens", str(new_tokens)]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.ask({"do": "ready"})

    def ask(self, request: dict[str, Any]) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.engine} (threads {self.threads}) died")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"worker {self.engine}: {answer['error']}")
        return answer["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.ask({"do": "quit"})
            self.process.wait(timeout=60)


def worker_main(engine: str, threads: int, workdir: Path, new_tokens: int) -> int:
    """Serve requests from the parent: one JSON line in, one out."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    run = _engine(engine, threads, workdir, new_tokens)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["do"] == "quit":
                print(json.dumps({"result": None}), flush=True)
                return 0
            if request["do"] == "ready":
                result: Any = None
            elif request["do"] == "outputs":
                result = run(request["batch"], request["beam"])
            elif request["do"] == "time":  # wall-clock and CPU seconds (all threads)
                start, cpu = time.perf_counter(), time.process_time()
                run(request["batch"], request["beam"])
                result = [time.perf_counter() - start, time.process_time() - cpu]
            elif request["do"] == "profile":
                result = _profile(run, request["batch"], request["beam"], new_tokens)
            else:
                raise ValueError(f"unknown request {request['do']!r}")
        except Exception as e:  # reported to the parent, which stops
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        print(json.dumps({"result": result}), flush=True)
    return 0


def _engine(engine: str, threads: int, workdir: Path, n: int):
    """``run(batch, beam) -> list of token id lists`` for one contender."""
    if engine.startswith("ct2"):
        import ctranslate2

        quantized = engine == "ct2-int8"
        directory = workdir / ("ct2-int8" if quantized else "ct2")
        translator = ctranslate2.Translator(
            str(directory), device="cpu", intra_threads=threads, inter_threads=1
        )
        vocab = json.loads((directory / "shared_vocabulary.json").read_text())
        index = {token: i for i, token in enumerate(vocab)}
        banned = [[vocab[PAD]], [vocab[BOS]]]

        def run_ct2(batch: int, beam: int) -> list[list[int]]:
            tokens = [[vocab[i] for i in row] for row in make_sources(batch).tolist()]
            results = translator.translate_batch(
                tokens,
                beam_size=beam,
                max_batch_size=0,
                min_decoding_length=n,
                max_decoding_length=n,
                suppress_sequences=banned,
                length_penalty=0.0 if beam > 1 else 1.0,
            )
            return [[index[t] for t in r.hypotheses[0]] for r in results]

        return run_ct2
    ours, theirs = make_models()
    if engine == "torch":
        return lambda batch, beam: torch_greedy(theirs, make_sources(batch), n).tolist()
    options = {
        "attnlab": {},
        "attnlab-int8": {"quantize": "int8"},
        "attnlab-reference": {"fast": False},
    }[engine]
    fixed = {"max_new_tokens": n, "min_new_tokens": n, **options}

    def run_attnlab(batch: int, beam: int) -> list[list[int]]:
        src = make_sources(batch)
        if beam == 1:
            return attnlab.greedy_search(ours, src, **fixed).tolist()
        return attnlab.beam_search(ours, src, beam_size=beam, **fixed).tolist()

    return run_attnlab


GEMM_OPS = ("aten::addmm", "aten::mm", "quantized::linear_dynamic", "aten::linear")
ATTENTION_OPS = ("aten::bmm", "aten::_softmax", "aten::softmax")
SEARCH_OPS = (
    "aten::_log_softmax",
    "aten::log_softmax",
    "aten::argmax",
    "aten::amax",
    "aten::topk",
    "aten::index_fill_",
    "aten::gather",
)


def _profile(run, batch: int, beam: int, n: int) -> dict[str, Any]:
    """Self CPU time shares of one decode by kind of op, the ops per step, the wall time per
    step (unprofiled), the time per step outside any op under the profiler (the profiled run's
    wall time less the ops' self times: Python, dispatch, and the profiler's own bookkeeping;
    the profiler also adds to each op's self time, so this is a lower bound of the Python
    share), and the mean time of one linear-map call of each kind. ``aten_calls_per_step``
    counts every op the profiler records, those that ops call inside themselves too (an addmm
    calls resolve_conj on its operands); ``python_calls_per_step`` counts only the ops called
    from Python (no op above them), each a trip through torch's dispatcher."""
    from torch.profiler import ProfilerActivity, profile

    run(batch, beam)
    start = time.perf_counter()
    run(batch, beam)
    wall = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run(batch, beam)
        profiled_wall = time.perf_counter() - start
    events = [e for e in prof.key_averages() if e.key.startswith(("aten::", "quantized::"))]
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    linear_calls = {
        e.key: {"calls_per_step": e.count / n, "us_per_call": e.self_cpu_time_total / e.count}
        for e in events
        if e.key in GEMM_OPS and e.count >= n
    }
    kinds = {"gemm": GEMM_OPS, "attention": ATTENTION_OPS, "search": SEARCH_OPS}
    shares = {
        k: sum(e.self_cpu_time_total for e in events if e.key in ops) / total
        for k, ops in kinds.items()
    }
    shares["other ops"] = 1.0 - sum(shares.values())
    calls = sum(e.count for e in events)
    ops = ("aten::", "quantized::")
    from_python = sum(  # an op whose caller is no op: Python called it
        e.name.startswith(ops) and not (e.cpu_parent and e.cpu_parent.name.startswith(ops))
        for e in prof.events()
    )
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {
        "shares": shares,
        "aten_calls_per_step": calls / n,
        "python_calls_per_step": from_python / n,
        "threads": torch.get_num_threads(),
        "wall_us_per_step": wall / n * 1e6,
        "profiled_wall_us_per_step": profiled_wall / n * 1e6,
        "outside_ops_us_per_step": max(0.0, profiled_wall * 1e6 - total) / n,
        "linear_calls": linear_calls,
        "top_ops": [
            {"op": e.key, "share": e.self_cpu_time_total / total, "calls": e.count} for e in top
        ],
    }


# -- the parent: export, check, time, report --------------------------------------------------


def contenders(plan: Plan, threads: int, case: Case) -> list[str]:
    names = ["attnlab", "ct2", "attnlab-int8", "ct2-int8"]
    if threads == 1:
        names.append("attnlab-reference")
    if case.beam == 1 and case.batch <= plan.torch_max_batch and threads == 1:
        names.append("torch")
    return names


def weight_budget(model: attnlab.Transformer) -> dict[str, float]:
    """What one decoding step reads and computes, per row, analytically (float32)."""
    decoder = sum(
        m.weight.numel() for m in model.decoder.modules() if isinstance(m, nn.Linear)
    ) - sum(layer.cross_attn.in_proj.weight.numel() * 2 // 3 for layer in model.decoder.layers)
    head = model.lm_head.weight.numel()
    return {
        "weight_bytes_per_step_fp32": 4.0 * (decoder + head),
        "weight_bytes_per_step_int8": 1.0 * (decoder + head),
        "linear_flops_per_row": 2.0 * (decoder + head),
    }


def bound_text(
    case: Case, tag: str, profile: dict[str, Any], budget: dict[str, float], rate: float
) -> str:
    """One line: what limits attnlab's row (``tag`` fp32 or int8), from its profile and the
    analytic budget."""
    s = profile["shares"]
    rows = case.batch * case.beam
    steps_per_s = rate / case.batch  # decoding steps per second (each step: one token per row)
    weight_bytes = budget[f"weight_bytes_per_step_{tag}"]
    gb_s = weight_bytes * steps_per_s / 1e9
    gflops = budget["linear_flops_per_row"] * rows * steps_per_s / 1e9
    mb = weight_bytes / 1e6
    parts = [
        f"GEMM {s['gemm']:.0%}, attention {s['attention']:.0%}, search {s['search']:.0%}, "
        f"other ops {s['other ops']:.0%} ({profile['aten_calls_per_step']:.0f} aten calls/step)",
        f"at {profile['threads']} thread(s) {profile['wall_us_per_step']:.0f} us/step "
        f"({profile['profiled_wall_us_per_step']:.0f} under the profiler, of which "
        f"{profile['outside_ops_us_per_step']:.0f} outside any op: Python, dispatch)",
    ]
    parts += [
        f"{op}: {c['calls_per_step']:.0f} calls/step at {c['us_per_call']:.1f} us"
        for op, c in profile["linear_calls"].items()
    ]
    if rows == 1:
        parts.append(f"weight streaming: {mb:.1f} MB of {tag} weights per token at {gb_s:.1f} GB/s")
    else:
        parts.append(
            f"GEMM arithmetic: {gflops:.0f} GFLOP/s in the linear maps ({rows} rows per step, "
            f"{mb / rows:.2f} MB of {tag} weights per token)"
        )
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few tokens, a small batch")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--quality", type=Path, help="a trained model directory: int8 quality")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--new-tokens", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.threads, args.workdir, args.new_tokens)
    if args.quality:
        out = QUALITY_OUT if args.out == DEFAULT_OUT else args.out
        return int8_quality(args.quality, out)
    return run_benchmark(args)


QUALITY_OUT = DEFAULT_OUT.with_name("decode_int8_quality.json")


def int8_quality(model_dir: Path, out: Path) -> int:
    """Score the test split of a trained model's task in float32 and int8 (greedy, beam 4)."""
    from attnlab.inference.scores import score
    from attnlab.inference.translator import Translator
    from attnlab.jobs import JOB_FILE, Job

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    job = Job.from_dict(json.loads((model_dir / JOB_FILE).read_text(encoding="utf-8")))
    pairs = job.task.load()["test"]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    results: dict[str, Any] = {}
    hypotheses: dict[str, list[str]] = {}
    for beam in (1, 4):
        for quantize in (None, "int8"):
            name = f"{'greedy' if beam == 1 else 'beam4'}_{quantize or 'fp32'}"
            translator = Translator.load(
                model_dir,
                device="cpu",
                decoding=job.eval.decoding.updated(beam_size=beam),
                max_tokens=job.eval.max_tokens,
                quantize=quantize,
            )
            translator.translate(sources[:8])  # warm-up: packs the weights
            start = time.perf_counter()
            hypotheses[name] = translator.translate(sources)
            seconds = time.perf_counter() - start
            scores = score(hypotheses[name], references).to_dict()
            results[name] = {
                "exact_match": scores["exact_match"],
                "chrf": scores["chrf"],
                "bleu": scores["bleu"],
                "seconds": seconds,
            }
            if quantize:
                exact = hypotheses[name.replace("int8", "fp32")]
                same = sum(a == b for a, b in zip(exact, hypotheses[name], strict=True))
                results[name]["same_output_as_fp32"] = same / len(sources)
            print(f"{name}: {json.dumps(results[name])}", flush=True)
    # A continuous measure where the outputs agree: log P of each greedy output under both.
    translator = Translator.load(model_dir, device="cpu", decoding=DecodingOptions(beam_size=1))
    ids = [row for row in translator.src_tokenizer.encode_batch(sources) if row]
    diffs = []
    for start in range(0, len(ids), 64):
        batch = ids[start : start + 64]
        exact = attnlab.greedy_search(translator.model, batch)
        int8 = attnlab.greedy_search(translator.model, batch, quantize="int8")
        for i, (a, b) in enumerate(zip(exact.tolist(), int8.tolist(), strict=True)):
            if a == b:
                diffs.append(abs(float(exact.log_probs[i] - int8.log_probs[i])) / (len(a) + 1))
    results["greedy_log_prob_per_token_abs_diff"] = {
        "mean": statistics.mean(diffs),
        "max": max(diffs),
        "sentences": len(diffs),
    }
    print(f"log P per token, |int8 - fp32|: {results['greedy_log_prob_per_token_abs_diff']}")
    report = {
        "benchmark": "decode_int8_quality",
        "task": job.task.name,
        "job": json.loads((model_dir / JOB_FILE).read_text(encoding="utf-8")),
        "sentences": len(pairs),
        "threads": 1,
        "torch_version": torch.__version__,
        "cpu": cpu_model(),
        "results": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def run_benchmark(args: argparse.Namespace) -> int:
    import ctranslate2

    from attnlab.formats import to_ctranslate2

    warnings.filterwarnings("ignore")
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    print(
        f"attnlab {attnlab.__version__}, CTranslate2 {ctranslate2.__version__}, torch "
        f"{torch.__version__}; cpu: {cpu_model()} ({os.cpu_count()} logical); "
        f"{'quick' if args.quick else 'full'} run, {plan.new_tokens} new tokens",
        flush=True,
    )
    ours, _ = make_models()
    budget = weight_budget(ours)
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}  # case -> threads -> engine
    cpu_samples: dict[str, dict[str, dict[str, list[float]]]] = {}  # the same, CPU seconds
    checks: dict[str, dict[str, Any]] = {}
    profiles: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="attnlab-decode-bench-") as tmp:
        workdir = Path(tmp)
        tokenizer = make_tokenizer()
        # A copy each: the export must not touch the model it reads.
        to_ctranslate2(copy.deepcopy(ours), tokenizer, workdir / "ct2")
        to_ctranslate2(copy.deepcopy(ours), tokenizer, workdir / "ct2-int8", quantization="int8")
        for threads in plan.threads:
            names = sorted({n for c in plan.cases for n in contenders(plan, threads, c)})
            workers = {n: Worker(n, threads, workdir, plan.new_tokens) for n in names}
            try:
                for case in plan.cases:
                    here = contenders(plan, threads, case)
                    request = {"batch": case.batch, "beam": case.beam}
                    if threads == plan.threads[0]:
                        outputs = {n: workers[n].ask({"do": "outputs", **request}) for n in here}
                        checks[case.key] = compare_outputs(outputs)
                        for name, key in (("attnlab", "fp32"), ("attnlab-int8", "int8")):
                            profiles[f"{case.key}_{key}"] = workers[name].ask(
                                {"do": "profile", **request}
                            )
                        print(f"{case.key}: {json.dumps(checks[case.key])}", flush=True)
                    times, cpu = time_interleaved(workers, here, request, plan, threads)
                    samples.setdefault(case.key, {})[str(threads)] = times
                    cpu_samples.setdefault(case.key, {})[str(threads)] = cpu
                    raw = {"samples_s": samples, "cpu_samples_s": cpu_samples, "checks": checks}
                    args.out.with_suffix(".partial.json").write_text(json.dumps(raw))
                    med = {
                        n: case.batch * plan.new_tokens / statistics.median(t)
                        for n, t in times.items()
                    }
                    print(
                        f"{case.key} threads={threads}: "
                        + ", ".join(f"{n} {v:,.0f} tok/s" for n, v in med.items()),
                        flush=True,
                    )
            finally:
                for w in workers.values():
                    w.close()
    wall = time.perf_counter() - started
    rows, table = report(plan, samples, cpu_samples, checks, profiles, budget)
    print()
    print_table(rows)
    print()
    print(table)
    extra = {
        "dims": {
            "preset": "small",
            "vocab": VOCAB,
            "source_length": SOURCE_LENGTH,
            "new_tokens": plan.new_tokens,
        },
        "ctranslate2_version": ctranslate2.__version__,
        "budget": budget,
        "output_checks": checks,
        "profiles": profiles,
        "samples_s": samples,
        "cpu_samples_s": cpu_samples,
        "markdown": table,
        "threads_measured": list(plan.threads),
    }
    args.threads = list(plan.threads)
    code = finish("decode", args, plan, rows, wall, extra)
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)  # the report holds it all
    return code


def compare_outputs(outputs: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Identical rows: attnlab fp32 against CTranslate2 fp32 and the others; int8 against
    the same engine's fp32, as token agreement."""
    base = outputs["attnlab"]
    rows = len(base)
    result: dict[str, Any] = {"rows": rows}
    for name, other in outputs.items():
        if name in ("attnlab", "attnlab-int8", "ct2-int8"):
            continue
        result[f"identical_rows_attnlab_vs_{name}"] = sum(
            a == b for a, b in zip(base, other, strict=True)
        )
    for quantized, exact in (("attnlab-int8", "attnlab"), ("ct2-int8", "ct2")):
        pairs = list(zip(outputs[quantized], outputs[exact], strict=True))
        same = sum(x == y for a, b in pairs for x, y in zip(a, b, strict=False))
        total = sum(max(len(a), len(b)) for a, b in pairs)
        result[f"{quantized}_token_agreement_with_fp32"] = same / max(total, 1)
    return result


def time_interleaved(
    workers: dict[str, Worker],
    names: list[str],
    request: dict[str, Any],
    plan: Plan,
    threads: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds per decode of each contender: warm-ups, then repetitions in
    rotating order, one contender at a time with a pause between runs."""
    for _ in range(plan.warmup):
        for name in names:
            workers[name].ask({"do": "time", **request})
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(plan.reps[threads]):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            time.sleep(PAUSE_S)
            seconds, cpu_seconds = workers[name].ask({"do": "time", **request})
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
    return wall, cpu


def _rate(case: Case, plan: Plan, seconds: list[float]) -> dict[str, float]:
    tokens = case.batch * plan.new_tokens
    return {
        "median": tokens / statistics.median(seconds),
        "best": tokens / min(seconds),
        "worst": tokens / max(seconds),
    }


def report(
    plan: Plan,
    samples: dict[str, dict[str, dict[str, list[float]]]],
    cpu_samples: dict[str, dict[str, dict[str, list[float]]]],
    checks: dict[str, Any],
    profiles: dict[str, Any],
    budget: dict[str, float],
) -> tuple[list[Row], str]:
    """Rows for the JSON (attnlab against CTranslate2 per thread count, and at each engine's
    best thread count) and the markdown table. Rates are medians of wall-clock time; the
    "CPU" ratios divide tokens per CPU-second (all threads), which a busy machine disturbs
    less (at 1 thread it is the rate an idle core would give)."""
    rows: list[Row] = []
    lines = [
        "| row | threads | attnlab fp32 tok/s | CT2 fp32 tok/s | attnlab / CT2 fp32, wall (CPU) | "
        "attnlab int8 | CT2 int8 | attnlab / CT2 int8, wall (CPU) | torch (no cache) | "
        "attnlab reference |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in plan.cases:
        by_threads = samples[case.key]
        rates = {
            t: {n: _rate(case, plan, s) for n, s in engines.items()}
            for t, engines in by_threads.items()
        }
        cpu_rates = {
            t: {n: _rate(case, plan, s) for n, s in engines.items()}
            for t, engines in cpu_samples[case.key].items()
        }
        for t, r in rates.items():
            c = cpu_rates[t]

            def cell(name: str, r: dict = r) -> str:
                if name not in r:
                    return "-"
                low, high = r[name]["worst"], r[name]["best"]
                return f"{r[name]['median']:,.0f} ({low:,.0f}-{high:,.0f})"

            def ratio(ours: str, anchor: str, r: dict = r, c: dict = c) -> str:
                wall = r[ours]["median"] / r[anchor]["median"]
                return f"**{wall:.2f}** ({c[ours]['median'] / c[anchor]['median']:.2f})"

            lines.append(
                f"| {case.key} | {t} | {cell('attnlab')} | {cell('ct2')} | "
                f"{ratio('attnlab', 'ct2')} | {cell('attnlab-int8')} | {cell('ct2-int8')} | "
                f"{ratio('attnlab-int8', 'ct2-int8')} | {cell('torch')} | "
                f"{cell('attnlab-reference')} |"
            )
        for ours, anchor, tag in (("attnlab", "ct2", "fp32"), ("attnlab-int8", "ct2-int8", "int8")):
            best_ours = max(rates, key=lambda t: rates[t][ours]["median"])
            best_anchor = max(rates, key=lambda t: rates[t][anchor]["median"])
            a, b = rates[best_ours][ours], rates[best_anchor][anchor]
            target = GOALS.get((case.key, tag))
            text, ok = check_target(a["median"] / b["median"], target, higher_is_better=True)
            details: dict[str, Any] = {
                "batch": case.batch,
                "beam": case.beam,
                "new_tokens": plan.new_tokens,
                "threads_attnlab": int(best_ours),
                "threads_anchor": int(best_anchor),
                "rates": rates,
                "cpu_rates": cpu_rates,
                "ratio_cpu_time": cpu_rates[best_ours][ours]["median"]
                / cpu_rates[best_anchor][anchor]["median"],
                "output_checks": checks.get(case.key),
            }
            profile = profiles.get(f"{case.key}_{tag}")
            if profile is not None:
                details["bound"] = bound_text(case, tag, profile, budget, a["median"])
            rows.append(
                Row(
                    key=f"{case.key}_{tag}",
                    label=f"{case.key} {tag}, best threads ({best_ours} vs {best_anchor})",
                    unit="tok/s",
                    attnlab=a["median"],
                    attnlab_best=a["best"],
                    baseline_name=ENGINES[anchor],
                    baseline=b["median"],
                    baseline_best=b["best"],
                    ratio=a["median"] / b["median"],
                    ratio_best=a["best"] / b["best"],
                    target=text,
                    passed=ok,
                    details=details,
                )
            )
    lines.append("")
    for row in rows:
        if "bound" in row.details:
            lines.append(f"- {row.key}: {row.details['bound']}")
    return rows, "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
