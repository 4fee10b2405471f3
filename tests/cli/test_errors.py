"""Bad input fails loudly: the right exception, and a message that names the argument.

Each case is its own test (``pytest.mark.parametrize`` ids). The regexes check that the message
names the offending argument and, where a shape is the problem, the shape itself.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
import torch
from torch import nn

from _helpers import default_sigint
from attnlab import (
    ALiBi,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    causal_mask,
    combine_masks,
    key_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from attnlab.nn.masks import from_torch_masks

E = 8  # d_model of the module used below
H = 2


def mha(**kwargs) -> MultiHeadAttention:
    return MultiHeadAttention(E, H, **kwargs)


def x(b: int = 2, t: int = 3, e: int = E, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(b, t, e, dtype=dtype)


def qkv(
    q_shape=(2, 2, 3, 4), k_shape=(2, 2, 5, 4), v_shape=(2, 2, 5, 4), dtypes=(torch.float32,) * 3
):
    return tuple(
        torch.randn(*s, dtype=dt) for s, dt in zip((q_shape, k_shape, v_shape), dtypes, strict=True)
    )


def sdpa(*args, **kwargs):
    return scaled_dot_product_attention(*args, **kwargs)


def esc(shape: tuple) -> str:
    return re.escape(str(tuple(shape)))


# (id, callable, exception type, regex on the message)
CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # -- MultiHeadAttention constructor
    (
        "mha-d_model-not-divisible",
        lambda: MultiHeadAttention(10, 3),
        ValueError,
        r"^d_model: 10 is not divisible by num_heads=3",
    ),
    (
        "mha-num_heads-zero",
        lambda: MultiHeadAttention(8, 0),
        ValueError,
        r"^num_heads: expected a positive int, got 0",
    ),
    (
        "mha-num_kv_heads-not-divisor",
        lambda: MultiHeadAttention(12, 4, num_kv_heads=3),
        ValueError,
        r"^num_kv_heads: expected a positive divisor of num_heads=4, got 3",
    ),
    (
        "mha-dropout-above-range",
        lambda: mha(dropout=1.0),
        ValueError,
        r"^dropout: expected a number in \[0, 1\), got 1\.0",
    ),
    (
        "mha-dropout-negative",
        lambda: mha(dropout=-0.1),
        ValueError,
        r"^dropout: expected a number in \[0, 1\), got -0\.1",
    ),
    (
        "mha-kdim-zero",
        lambda: mha(kdim=0),
        ValueError,
        r"^kdim: expected a positive int, got 0",
    ),
    (
        "mha-positional-sinusoidal",
        lambda: mha(positional=SinusoidalPositionalEncoding(E)),
        TypeError,
        r"^positional: expected an AttentionPositional .*got SinusoidalPositionalEncoding",
    ),
    (
        "mha-rope-head_dim-mismatch",
        lambda: mha(positional=RotaryEmbedding(8)),
        ValueError,
        r"^positional: RotaryEmbedding has head_dim=8, but this attention has head_dim=4",
    ),
    (
        "mha-alibi-heads-mismatch",
        lambda: mha(positional=ALiBi(4)),
        ValueError,
        r"^positional: built for 4 heads, attention has 2",
    ),
    # -- MultiHeadAttention.forward
    (
        "mha-x-not-3d",
        lambda: mha()(torch.randn(3, E)),
        ValueError,
        r"^x: expected shape \(B, T_q, d_model=8\), got " + esc((3, E)),
    ),
    (
        "mha-x-width",
        lambda: mha()(x(e=7)),
        ValueError,
        r"^x: expected shape \(B, T_q, d_model=8\), got " + esc((2, 3, 7)),
    ),
    (
        "mha-x-not-tensor",
        lambda: mha()([[1.0] * E]),
        ValueError,
        r"^x: expected shape .*got list",
    ),
    (
        "mha-empty-sequence",
        lambda: mha()(x(t=0)),
        ValueError,
        r"^x: empty sequence \(T_q = 0\) in shape " + esc((2, 0, E)),
    ),
    (
        "mha-empty-context",
        lambda: mha()(x(), x(t=0)),
        ValueError,
        r"^context: empty sequence \(T_k = 0\) in shape " + esc((2, 0, E)),
    ),
    (
        "mha-context-batch-mismatch",
        lambda: mha()(x(b=2), x(b=3, t=4)),
        ValueError,
        r"^context: batch size 3 differs from x's 2 \(x " + esc((2, 3, E)),
    ),
    (
        "mha-context-width-not-kdim",
        lambda: mha(kdim=6, vdim=6)(x(), x(e=5)),
        ValueError,
        r"^context: expected shape \(B, T_k, 6\), got " + esc((2, 3, 5)),
    ),
    (
        "mha-value-width-not-vdim",
        lambda: mha(kdim=6, vdim=5)(x(), x(e=6), value=x(e=6)),
        ValueError,
        r"^value: expected shape \(B, T_k, 5\), got " + esc((2, 3, 6)),
    ),
    (
        "mha-value-length-mismatch",
        lambda: mha()(x(), x(t=5), value=x(t=4)),
        ValueError,
        r"^value: length 4 differs from context's 5 \(context " + esc((2, 5, E)),
    ),
    (
        "mha-value-without-context",
        lambda: mha()(x(), value=x()),
        ValueError,
        r"^value: given without context",
    ),
    (
        "mha-value-required-when-vdim-differs",
        lambda: mha(kdim=6, vdim=5)(x(), x(e=6)),
        ValueError,
        r"^value: required, since vdim=5 differs from kdim=6",
    ),
    (
        "mha-context-required-for-kdim",
        lambda: mha(kdim=6)(x()),
        ValueError,
        r"^context: required, since kdim=6",
    ),
    (
        "mha-context-dtype",
        lambda: mha()(x(), x(dtype=torch.float64)),
        TypeError,
        r"^context: dtype torch\.float64 differs from x's torch\.float32",
    ),
    (
        "mha-mask-shape",
        lambda: mha()(x(t=3), mask=torch.ones(3, 5, dtype=torch.bool)),
        ValueError,
        r"^mask: shape "
        + esc((3, 5))
        + r" does not broadcast to \(B, H, T_q, T_k\) = "
        + esc((2, H, 3, 3)),
    ),
    (
        "mha-mask-shape-with-rope",
        lambda: mha(positional=RotaryEmbedding(4))(x(t=3), mask=torch.ones(4, 3, dtype=torch.bool)),
        ValueError,
        r"^mask: shape " + esc((4, 3)) + r" does not broadcast",
    ),
    (
        "mha-mask-integer",
        lambda: mha()(x(t=3), mask=torch.ones(3, 3, dtype=torch.long)),
        TypeError,
        r"^mask: expected a bool mask .*got dtype torch\.int64",
    ),
    (
        "mha-average_weights-without-need_weights",
        lambda: mha()(x(), average_weights=True),
        ValueError,
        r"^average_weights: only meaningful with need_weights=True",
    ),
    # -- torch interop
    (
        "from_torch-add_bias_kv",
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(E, H, add_bias_kv=True)),
        ValueError,
        r"^module: add_bias_kv=True has no attnlab equivalent",
    ),
    (
        "from_torch-add_zero_attn",
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(E, H, add_zero_attn=True)),
        ValueError,
        r"^module: add_zero_attn=True",
    ),
    (
        "from_torch-not-a-module",
        lambda: MultiHeadAttention.from_torch(nn.Linear(E, E)),
        TypeError,
        r"^module: expected torch\.nn\.MultiheadAttention, got Linear",
    ),
    (
        "to_torch-gqa",
        lambda: MultiHeadAttention(E, 4, num_kv_heads=2).to_torch(),
        ValueError,
        r"^num_kv_heads=2: torch\.nn\.MultiheadAttention has no grouped-query attention",
    ),
    (
        "to_torch-positional",
        lambda: mha(positional=ALiBi(H)).to_torch(),
        ValueError,
        r"^positional: torch\.nn\.MultiheadAttention has no RoPE / ALiBi",
    ),
    # -- scaled_dot_product_attention
    (
        "sdpa-q-not-4d",
        lambda: sdpa(torch.randn(2, 3, 4), *qkv()[1:]),
        ValueError,
        r"^q: expected a 4-D tensor \(B, H, T, Dh\), got " + esc((2, 3, 4)),
    ),
    (
        "sdpa-v-not-4d",
        lambda: sdpa(*qkv()[:2], torch.randn(5, 4)),
        ValueError,
        r"^v: expected a 4-D tensor \(B, H, T, Dh\), got " + esc((5, 4)),
    ),
    (
        "sdpa-integer-q",
        lambda: sdpa(torch.ones(2, 2, 3, 4, dtype=torch.long), *qkv()[1:]),
        TypeError,
        r"^q: expected a floating dtype, got torch\.int64",
    ),
    (
        "sdpa-mixed-dtypes",
        lambda: sdpa(*qkv(dtypes=(torch.float32, torch.float64, torch.float32))),
        TypeError,
        r"^q, k, v: dtypes differ: torch\.float32, torch\.float64, torch\.float32",
    ),
    (
        "sdpa-batch-mismatch",
        lambda: sdpa(*qkv(k_shape=(3, 2, 5, 4))),
        ValueError,
        r"^q, k, v: batch sizes differ: q " + esc((2, 2, 3, 4)) + r", k " + esc((3, 2, 5, 4)),
    ),
    (
        "sdpa-head-dim-mismatch",
        lambda: sdpa(*qkv(k_shape=(2, 2, 5, 6))),
        ValueError,
        r"^q, k: head dims differ: q " + esc((2, 2, 3, 4)) + r", k " + esc((2, 2, 5, 6)),
    ),
    (
        "sdpa-kv-length-mismatch",
        lambda: sdpa(*qkv(v_shape=(2, 2, 6, 4))),
        ValueError,
        r"^k, v: key and value lengths differ: .*v " + esc((2, 2, 6, 4)),
    ),
    (
        "sdpa-kv-heads-not-dividing",
        lambda: sdpa(*qkv(q_shape=(2, 3, 3, 4))),
        ValueError,
        r"^q, k, v: k and v need the same head count, dividing q's .*q " + esc((2, 3, 3, 4)),
    ),
    (
        "sdpa-empty-sequence",
        lambda: sdpa(*qkv(q_shape=(2, 2, 0, 4))),
        ValueError,
        r"^q, k, v: empty sequence or head dim: q " + esc((2, 2, 0, 4)),
    ),
    (
        "sdpa-mask-on-another-device",
        lambda: sdpa(*qkv(), torch.ones(3, 5, dtype=torch.bool, device="meta")),
        ValueError,
        r"^mask: on device meta, but the scores are on cpu",
    ),
    (
        "sdpa-scale-zero",
        lambda: sdpa(*qkv(), scale=0.0),
        ValueError,
        r"^scale: expected a positive finite number, got 0\.0",
    ),
    (
        "sdpa-scale-nan",
        lambda: sdpa(*qkv(), scale=float("nan")),
        ValueError,
        r"^scale: expected a positive finite number, got nan",
    ),
    (
        "sdpa-dropout_p-one",
        lambda: sdpa(*qkv(), dropout_p=1.0),
        ValueError,
        r"^dropout_p: expected a number in \[0, 1\), got 1\.0",
    ),
    (
        "sdpa-dropout_p-negative",
        lambda: sdpa(*qkv(), dropout_p=-0.5),
        ValueError,
        r"^dropout_p: expected a number in \[0, 1\), got -0\.5",
    ),
    (
        "sdpa-mask-shape",
        lambda: sdpa(*qkv(), torch.ones(2, 2, 5, 3, dtype=torch.bool)),
        ValueError,
        r"^mask: shape "
        + esc((2, 2, 5, 3))
        + r" does not broadcast to \(B, H, T_q, T_k\) = "
        + esc((2, 2, 3, 5)),
    ),
    (
        "sdpa-mask-5d",
        lambda: sdpa(*qkv(), torch.ones(1, 1, 1, 3, 5, dtype=torch.bool)),
        ValueError,
        r"^mask: shape " + esc((1, 1, 1, 3, 5)) + r" does not broadcast",
    ),
    (
        "sdpa-mask-integer",
        lambda: sdpa(*qkv(), torch.ones(3, 5, dtype=torch.int32)),
        TypeError,
        r"^mask: expected a bool mask \(True = may attend\) .*got dtype torch\.int32",
    ),
    (
        "sdpa-mask-float-dtype",
        lambda: sdpa(*qkv(), torch.zeros(3, 5, dtype=torch.float64)),
        TypeError,
        r"^mask: floating mask has dtype torch\.float64 but the scores are torch\.float32",
    ),
    (
        "sdpa-mask-nan",
        lambda: sdpa(*qkv(), torch.zeros(3, 5).index_fill_(1, torch.tensor([2]), float("nan"))),
        ValueError,
        r"^mask: floating mask contains NaN or \+inf",
    ),
    (
        "sdpa-mask-posinf",
        lambda: sdpa(*qkv(), torch.full((3, 5), float("inf"))),
        ValueError,
        r"^mask: floating mask contains NaN or \+inf",
    ),
    # -- masks
    (
        "causal_mask-t_q-zero",
        lambda: causal_mask(0),
        ValueError,
        r"^t_q: expected a positive int, got 0",
    ),
    (
        "causal_mask-t_k-negative",
        lambda: causal_mask(3, -2),
        ValueError,
        r"^t_k: expected a positive int, got -2",
    ),
    (
        "causal_mask-t_q-float",
        lambda: causal_mask(2.0),
        ValueError,
        r"^t_q: expected a positive int, got 2\.0",
    ),
    (
        "padding_mask-negative-length",
        lambda: padding_mask([3, -1]),
        ValueError,
        r"^lengths: expected non-negative lengths, got min -1",
    ),
    (
        "padding_mask-max_len-too-small",
        lambda: padding_mask([5, 2], max_len=3),
        ValueError,
        r"^max_len: expected >= the longest length 5, got 3",
    ),
    (
        "padding_mask-float-lengths",
        lambda: padding_mask(torch.tensor([2.0, 1.0])),
        TypeError,
        r"^lengths: expected an integer tensor, got dtype torch\.float32",
    ),
    (
        "padding_mask-2d-lengths",
        lambda: padding_mask(torch.ones(2, 2, dtype=torch.long)),
        ValueError,
        r"^lengths: expected a 1-D \(B,\) tensor, got shape " + esc((2, 2)),
    ),
    (
        "key_mask-not-bool",
        lambda: key_mask(torch.ones(2, 3)),
        TypeError,
        r"^padding: expected a \(B, T\) bool tensor .*got torch\.float32 of shape " + esc((2, 3)),
    ),
    (
        "combine_masks-not-broadcasting",
        lambda: combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 3)),
        ValueError,
        r"^masks: shapes " + esc((2, 3)) + ", " + esc((4, 3)) + " do not broadcast together",
    ),
    (
        "combine_masks-float-dtypes-differ",
        lambda: combine_masks(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64)),
        TypeError,
        r"^masks: floating masks have different dtypes \(torch\.float32, torch\.float64\)",
    ),
    (
        "combine_masks-integer",
        lambda: combine_masks(
            torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.long)
        ),
        TypeError,
        r"^masks\[1\]: expected bool or floating dtype, got torch\.int64",
    ),
    (
        "from_torch_masks-attn_mask-shape",
        lambda: from_torch_masks(
            None, torch.ones(5, 3, 4, dtype=torch.bool), batch_size=2, num_heads=2
        ),
        ValueError,
        r"^attn_mask: expected \(T_q, T_k\) or \(B \* num_heads = 4, T_q, T_k\), got "
        + esc((5, 3, 4)),
    ),
    (
        "from_torch_masks-key_padding_mask-batch",
        lambda: from_torch_masks(torch.ones(3, 4, dtype=torch.bool), batch_size=2, num_heads=2),
        ValueError,
        r"^key_padding_mask: expected shape \(B, T_k\) with B=2, got " + esc((3, 4)),
    ),
    # -- positional
    (
        "learned-past-max_len",
        lambda: LearnedPositionalEmbedding(4, E)(x(t=3), offset=2),
        ValueError,
        r"^positions 2\.\.4 exceed max_len=4 of LearnedPositionalEmbedding",
    ),
    (
        "learned-x-width",
        lambda: LearnedPositionalEmbedding(4, E)(x(e=5)),
        ValueError,
        r"^x: expected shape \(\.\.\., T, d_model=8\), got " + esc((2, 3, 5)),
    ),
    (
        "sinusoidal-empty-sequence",
        lambda: SinusoidalPositionalEncoding(E)(x(t=0)),
        ValueError,
        r"^x: empty sequence \(T = 0\) in shape " + esc((2, 0, E)),
    ),
    (
        "sinusoidal-negative-offset",
        lambda: SinusoidalPositionalEncoding(E)(x(), offset=-1),
        ValueError,
        r"^offset: expected a non-negative int, got -1",
    ),
    (
        "sinusoidal-d_model-zero",
        lambda: SinusoidalPositionalEncoding(0),
        ValueError,
        r"^d_model: expected a positive int, got 0",
    ),
    (
        "sinusoidal-base-not-above-one",
        lambda: SinusoidalPositionalEncoding(E, base=1.0),
        ValueError,
        r"^base: expected a number > 1, got 1\.0",
    ),
    (
        "rope-odd-head_dim",
        lambda: RotaryEmbedding(7),
        ValueError,
        r"^head_dim: RoPE rotates channel pairs, expected even, got 7",
    ),
    (
        "rope-rotate-width",
        lambda: RotaryEmbedding(4).rotate(torch.randn(2, 3, 6)),
        ValueError,
        r"^x: expected shape \(\.\.\., T, head_dim=4\), got " + esc((2, 3, 6)),
    ),
    (
        "alibi-num_heads-zero",
        lambda: ALiBi(0),
        ValueError,
        r"^num_heads: expected a positive int, got 0",
    ),
    (
        "alibi-bias-t_k-zero",
        lambda: ALiBi(2).bias(3, 0),
        ValueError,
        r"^t_k: expected a positive int, got 0",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_naming_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    # exactly the documented kind: a ValueError where a TypeError is promised (or back) is a bug
    assert type(info.value) is exc


def test_case_ids_are_unique_and_plenty():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 20


# -- the command line's error boundary ---------------------------------------------------------
#
# Every failure of `attnlab` is one line on stderr, "attnlab COMMAND: error: ...", with exit
# status 2 for bad input and 1 for a failure at run time (130 for Ctrl-C); `attnlab --debug`
# shows the traceback instead. In-process cases replace a command's function with one that
# raises; the subprocess cases run the real command against a real fault.


def _fail_with(monkeypatch, error: BaseException) -> None:
    from attnlab.cli import masks

    def command(args):
        raise error

    monkeypatch.setattr(masks, "cmd_masks", command)


SAFETENSORS_FULL_DISK = (
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
    'left on device" })'
)


def _safetensor_error(message: str) -> Exception:
    from safetensors import SafetensorError

    return SafetensorError(message)


@pytest.mark.parametrize(
    ("error", "status", "line"),
    [
        (ValueError("--lengths: expected positive integers"), 2, "--lengths: expected positive"),
        (TypeError("beam_size: expected an int, got str"), 2, "beam_size: expected an int"),
        (FileNotFoundError("runs/x/model: no such directory"), 2, "runs/x/model: no such"),
        (PermissionError(13, "Permission denied"), 2, "Permission denied"),
        (OSError(28, "No space left on device"), 1, "No space left on device"),
        (ConnectionResetError(104, "Connection reset by peer"), 1, "Connection reset by peer"),
        (MemoryError(), 1, "out of memory"),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                         "1600000000000 bytes.\nException raised from malloc at alloc_cpu.cpp:116"),
            1,
            "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate "
            "1600000000000 bytes. [...]",
        ),
        (None, 1, "SafetensorError: " + SAFETENSORS_FULL_DISK),
        (AttributeError("'list' object has no attribute 'get'"), 1,
         "unexpected AttributeError: 'list' object has no attribute 'get' (a bug; "),
        (KeyError("task"), 1, "unexpected KeyError: task (a bug; "),
    ],
    ids=[
        "value", "type", "missing-file", "permission", "full-disk", "network", "memory",
        "torch-oom", "safetensors-full-disk", "attribute", "key",
    ],
)  # fmt: skip
def test_cli_errors_are_one_line_with_the_right_status(monkeypatch, capsys, error, status, line):
    from attnlab.cli import main

    _fail_with(
        monkeypatch, error if error is not None else _safetensor_error(SAFETENSORS_FULL_DISK)
    )
    assert main(["masks"]) == status
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("attnlab masks: error: ")
    assert line in err
    assert "Traceback" not in err


def test_cli_ctrl_c_is_one_line_and_130(monkeypatch, capsys):
    from attnlab.cli import main

    _fail_with(monkeypatch, KeyboardInterrupt())
    assert main(["masks"]) == 130
    assert capsys.readouterr().err == "attnlab masks: interrupted\n"


def test_cli_debug_shows_the_traceback(monkeypatch):
    from attnlab.cli import main

    _fail_with(monkeypatch, AttributeError("'list' object has no attribute 'get'"))
    with pytest.raises(AttributeError, match="no attribute 'get'"):
        main(["--debug", "masks"])
    _fail_with(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        main(["--debug", "masks"])


def _job_json_holding_a_list(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "job.json").write_text("[]\n")
    return model


def test_cli_a_job_json_holding_a_list_is_one_line_of_bad_input(tmp_path, capsys):
    from attnlab.cli import main

    assert main(["evaluate", "--model", str(_job_json_holding_a_list(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnlab evaluate: error: ")
    assert "job.json: " in err and "list" in err


# -- through the real command, in a subprocess -------------------------------------------------


def _attnlab(*argv: str, preexec_fn=None, **options) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "attnlab", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint(preexec_fn),  # SIGINT reaches it even if the suite ignores it
        **options,
    )


def _lines(stream) -> queue.Queue:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()
    return lines


def _finish(process: subprocess.Popen, what: str) -> tuple[int, str]:
    try:
        code = process.wait(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"{what}: the command did not end within 180 s")
    return code, process.stderr.read()


@pytest.mark.slow
def test_cli_sigint_during_training_exits_130_with_one_line(tmp_path):
    process = _attnlab(
        "train", "--task", "numbers", "--out", str(tmp_path / "run"),
        "--no-progress", "--max-steps", "100000", "--checkpoint-every", "100000",
    )  # fmt: skip
    lines = _lines(process.stdout)
    try:
        first = lines.get(timeout=180)  # "attnlab train: numbers en->de into ..."
    except queue.Empty:
        process.kill()
        pytest.fail(f"attnlab train printed nothing in 180 s: {process.stderr.read()}")
    assert first.startswith("attnlab train: ")
    line = first
    while not line.startswith("  model: "):  # the last line before the training loop starts
        try:
            line = lines.get(timeout=180)
        except queue.Empty:
            process.kill()
            pytest.fail(f"attnlab train did not reach training in 180 s: {process.stderr.read()}")
    process.send_signal(signal.SIGINT)
    code, err = _finish(process, "SIGINT")
    assert code == 130, err
    assert err == "attnlab train: interrupted\n"


def _limit_file_size(limit: int):
    """For a child process: files may not grow past ``limit`` bytes (the write fails with EFBIG
    instead of the default SIGXFSZ): a disk that refuses, without filling a real one."""

    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
@pytest.mark.slow
def test_cli_a_disk_that_refuses_a_picture_is_one_line_and_1(tmp_path):
    out = tmp_path / "pe.png"
    out.write_bytes(b"the old picture")
    process = _attnlab("viz", "pe", "--out", str(out), preexec_fn=_limit_file_size(2000))
    code, err = _finish(process, "a refused write")
    assert code == 1, err
    assert err.count("\n") == 1, err
    assert err.startswith(f"attnlab viz: error: {out}: not written (File too large)")
    assert out.read_bytes() == b"the old picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.png"]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
@pytest.mark.slow
def test_cli_a_disk_that_refuses_the_weights_is_one_line_and_1(tmp_path):
    """The weights' writer meets the refused write (EFBIG): one line too."""
    process = _attnlab(
        "train", "--task", "numbers", "--out", str(tmp_path / "run"),
        "--no-progress", "--max-steps", "1", "--checkpoint-every", "1", "--eval-every", "1",
        "--set", "train.schedule=transformer", "--set", "model.d_model=64",
        "--set", "model.d_ff=128", "--set", "task.high=199",
        "--set", "task.valid_size=20", "--set", "task.test_size=20",
        "--set", "tokenizer.vocab_size=300",
        preexec_fn=_limit_file_size(100_000),
    )  # fmt: skip
    code, err = _finish(process, "a refused weights file")
    assert code == 1, err
    assert err.count("\n") == 1, err
    assert "File too large" in err and "Traceback" not in err
