"""Every example in README.md, README.zh.md and the docs pages runs, so none can rot (issue 26).

The rules a page's code blocks follow (CONTRIBUTING.md, "Examples in the docs"):

* Fenced blocks labelled ``bash``, ``sh`` or ``python`` are run; ``text``, ``toml``, ``json``
  and unlabelled blocks are shown, not run.
* A line ``<!-- file: PATH -->`` right before a block writes that block, as it stands, to PATH
  in the page's working directory (a job file, a few lines of data) when the page's run reaches
  it.
* All blocks of one page run in page order in one fresh temporary directory, so a block may
  use a file an earlier block of the page wrote. A Python block runs in a fresh namespace: it
  imports what it uses.
* Before a page runs, its directory holds small trained models at the paths the pages use:
  ``runs/numbers`` (the numbers task, as ``attnlab train --task numbers`` but 1 + 1 narrow
  layers for a few steps), ``runs/digits`` (the digits ViT, a few steps) and ``runs/text`` (a
  language model on ``book.txt``, which is there too), parallel files of the numbers task
  (``data/train.en``, ``data/train.de``, ``valid.*``, ``test.*``, and the same files at the
  top level), and ``opus-mt-en-de``: a tiny random
  ``MarianMTModel`` directory in opus-mt's layout (SentencePiece models trained on the numbers
  task's sentences, which need no data), standing in for the real download, which needs the
  network. The pages name these
  paths; the test substitutes nothing in a page's text.
* Commands that train for minutes or run until stopped are checked, not run: ``attnlab
  train`` (its argv is parsed by attnlab's own parser and its job, file and flags together,
  is built and checked as ``attnlab train`` does before any work), ``attnlab prepare`` (which
  prepares a large corpus into the user's cache: its job built and checked alike),
  ``attnlab serve`` (parsed),
  ``torchrun ... -m attnlab ARGS`` (ARGS as above), ``make TARGET`` (the Makefile has the
  target) and ``pip install`` (the extras it names exist). A checked ``attnlab train`` whose
  ``--out`` does not exist yet gets the prepared run of its kind of task there (a stand-in for
  the run it would have trained), so that the page's next lines can use ``OUT/model``.
* A line that is one plain ``attnlab`` command (no pipe, redirection, glob or substitution)
  runs through ``attnlab.cli.main``, the function the installed command calls, in the test's
  process (torch starts once, not once a line); any other line runs in bash, with the
  installed ``attnlab`` first on PATH. A line that fails (a non-zero exit) fails the page.
* ``<!-- no-test: REASON -->`` right before a block leaves it out (the reason is required and
  shown in the test's output); ``<!-- needs: cuda -->`` runs it only where CUDA is available.

Excluded: generated pages (the CLI and API references, written at build time, not on disk) and
the sample ``attnlab explain`` reports (``docs/explain/report*.md``, output of a program).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import redirect_stderr
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose examples run: the READMEs (English and Chinese) and every page of docs/ (the
#: Chinese *.zh.md ones too) but the explain reports.
_DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
PAGES = [
    "README.md",
    "README.zh.md",
    *(page for page in _DOCS if not page.startswith("docs/explain/report")),
]
RUN_LANGUAGES = {"bash", "sh", "python"}
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*(?P<kind>file|no-test|needs):\s*(?P<value>.*?)\s*-->\s*$")
#: Commands checked by parsing, not run (the module docstring says why).
PARSED_ONLY = {"train", "prepare", "serve"}


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    file: str | None = None  # <!-- file: PATH -->
    skip: str | None = None  # <!-- no-test: REASON -->
    needs: str | None = None  # <!-- needs: cuda -->

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of ``text`` in order, each with the markers written right before it
    (only blank lines between)."""
    found: list[Block] = []
    lines = text.splitlines()
    markers: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line.strip())
        if marker:
            markers[marker.group("kind")] = marker.group("value")
        elif fence:
            closing, body = fence.group("fence"), []
            start = index
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(closing):
                body.append(lines[index])
                index += 1
            found.append(
                Block(
                    page,
                    start + 1,
                    fence.group("lang").lower(),
                    "\n".join(body) + "\n",
                    file=markers.get("file"),
                    skip=markers.get("no-test"),
                    needs=markers.get("needs"),
                )
            )
            markers = {}
        elif line.strip():
            markers = {}
        index += 1
    return found


def commands(code: str) -> list[str]:
    """The logical lines of a shell block: continuations joined, blanks and comments dropped."""
    out, current = [], ""
    for raw in code.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip() and not current.strip().startswith("#"):
            out.append(current.strip())
        current = ""
    return out


def _parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by attnlab's parser; a refusal fails the test with argparse's message."""
    from attnlab.cli import build_parser

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"attnlab {shlex.join(argv)}: refused by the parser: {stderr.getvalue()}")
    return args


@contextlib.contextmanager
def _inside(directory: Path):
    """The working directory is ``directory`` inside the block (relative paths resolve there)."""
    old = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(old)


def stand_in(job, out: str | None, cwd: Path) -> None:
    """Where a checked (not run) ``attnlab train`` names a new ``--out``, put the prepared run
    of the same kind of task there (``runs/text``, ``runs/digits``, else ``runs/numbers``), so
    that the lines after it find a model in ``OUT/model``."""
    if not out or (cwd / out).exists():
        return
    kind = "numbers" if job.task.decodes else job.task.name
    shutil.copytree(cwd / "runs" / kind, cwd / out)


def check_without_running(words: list[str], where: str, cwd: Path) -> bool:
    """Check a command that is not to be run (see the module docstring); False when ``words``
    is a command to run."""
    if words[:1] == ["torchrun"]:
        assert "-m" in words and words[words.index("-m") + 1] == "attnlab", where
        words = ["attnlab", *words[words.index("-m") + 2 :]]
    if words[:1] == ["attnlab"] and len(words) > 1 and words[1] in PARSED_ONLY:
        args = _parse(words[1:])
        if words[1] == "train":
            from attnlab.cli.train import build_job

            try:
                with _inside(cwd):
                    job = build_job(args)
                    job.check()
            except (OSError, TypeError, ValueError) as error:
                pytest.fail(f"{where}: attnlab {shlex.join(words[1:])}: {error}")
            stand_in(job, args.out, cwd)
        if words[1] == "prepare":
            from attnlab.jobs import compose_job

            try:
                with _inside(cwd):
                    compose_job(args.config, sets=args.set or ()).check()
            except (OSError, TypeError, ValueError) as error:
                pytest.fail(f"{where}: attnlab {shlex.join(words[1:])}: {error}")
        return True
    if words[:1] == ["make"]:
        makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
        for target in words[1:]:
            if "=" not in target:
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), (where, target)
        return True
    if words[:2] == ["pip", "install"]:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        known = set(extras["project"]["optional-dependencies"])
        for word in words[2:]:
            match = re.fullmatch(r"(?:attnlab|\.)\[([\w,-]+)\]", word)
            if match:
                assert set(match.group(1).split(",")) <= known, (where, word)
        return True
    return False


def _environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "OMP_NUM_THREADS": "1",  # tiny models; the machine is shared
        "MPLBACKEND": "Agg",
    }


#: Characters that make a line more than one plain command (pipes, redirections, globs, ...).
SHELL_SYNTAX = re.compile(r"[|<>;&()$`*?\[\]]")
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def plain_attnlab(line: str) -> bool:
    """Whether ``line`` is one ``attnlab`` command and nothing else a shell would act on."""
    bare = QUOTED.sub("''", line).split(" #")[0]
    return line.startswith("attnlab ") and not SHELL_SYNTAX.search(bare)


def _bash(lines: list[str], block: Block, cwd: Path) -> None:
    result = subprocess.run(
        ["bash", "-c", "\n".join(["set -euo pipefail", *lines])],
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"{block.where}: the shell block failed (exit {result.returncode}):\n{block.code}\n"
        f"stderr:\n{result.stderr[-3000:]}"
    )


def _attnlab(words: list[str], block: Block, cwd: Path) -> None:
    """``attnlab ARGS`` through ``attnlab.cli.main``, the function the installed command calls,
    in this process (an interpreter and torch start once, not once a line)."""
    from attnlab.cli import main

    stderr = io.StringIO()
    try:
        with _inside(cwd), contextlib.redirect_stdout(io.StringIO()), redirect_stderr(stderr):
            status = main(words[1:])
    except SystemExit as exit:
        status = exit.code
    assert status in (0, None), (
        f"{block.where}: {shlex.join(words)} exited with {status}:\n{stderr.getvalue()[-3000:]}"
    )


def run_shell(block: Block, cwd: Path) -> None:
    """Each line in order: checked (not run), one plain ``attnlab`` command in-process, or
    (consecutive lines together) a bash script."""
    pending: list[str] = []
    for line in commands(block.code):
        words = shlex.split(line, comments=True)
        if check_without_running(words, block.where, cwd):
            continue
        if plain_attnlab(line):
            if pending:
                _bash(pending, block, cwd)
                pending = []
            _attnlab(words, block, cwd)
        else:
            pending.append(line)
    if pending:
        _bash(pending, block, cwd)


def run_python(block: Block, cwd: Path) -> None:
    code = compile(block.code, block.where, "exec")
    try:
        with _inside(cwd), contextlib.redirect_stdout(io.StringIO()):
            exec(code, {"__name__": "__main__"})
    except Exception as error:  # every failure of a block fails the page
        pytest.fail(f"{block.where}: the Python block failed: {error!r}\n{block.code}")


def _train(argv: list[str], cwd: Path) -> None:
    from attnlab.cli import main

    with _inside(cwd), contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0, argv


#: The prepared runs' training: a few steps each, bounded by steps.
_SMALL = ["--no-progress", "--max-steps", "6", "--warmup", "2", "--eval-every", "3"]
_SMALL += ["--checkpoint-every", "3", "--set", "train.average_last=1"]
_NARROW = [
    "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.num_heads=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``runs/numbers``, ``runs/digits``, ``runs/text``, ``book.txt`` and
    parallel files (``data/{train,valid,test}.{en,de}``, and the same at the top level)."""
    from attnlab.data.corpora import numbers as number_pairs

    root = tmp_path_factory.mktemp("docs-runs")
    lines = [f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(60)]
    (root / "book.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = number_pairs(high=199, valid_size=20, test_size=20)
    for directory in (root / "data", root):
        directory.mkdir(exist_ok=True)
        for split, sentences in pairs.splits.items():
            for side, lang in enumerate(("en", "de")):
                text = "\n".join(pair[side] for pair in sentences) + "\n"
                (directory / f"{split}.{lang}").write_text(text, encoding="utf-8")
    numbers = [
        "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1",
        "--set", "task.high=99", "--set", "task.valid_size=10", "--set", "task.test_size=10",
        "--set", "tokenizer.vocab_size=300", "--set", "eval.bleu_sentences=5",
    ]  # fmt: skip
    _train(
        ["train", "--task", "numbers", "--out", "runs/numbers", *_SMALL, *_NARROW, *numbers], root
    )
    digits = ["--set", "train.max_epochs=1", "--set", "model.num_layers=1"]
    _train(["train", "--task", "digits", "--out", "runs/digits", *_SMALL, *_NARROW, *digits], root)
    text = ["--text-file", "book.txt", "--preset", "tiny", "--set", "tokenizer.vocab_size=300"]
    _train(["train", "--task", "text", "--out", "runs/text", *_SMALL, *_NARROW, *text], root)
    tiny_opus_mt(root / "opus-mt-en-de")
    return root


#: Prepared paths that could not be made here, and why: a page that names one skips, saying so.
UNAVAILABLE: dict[str, str] = {}


def tiny_opus_mt(directory: Path) -> None:
    """A random 1 + 1 layer MarianMTModel with opus-mt's tokenizer files in ``directory``,
    whose SentencePiece models learn from the numbers task's sentences (made by num2words):
    no data set is needed. Without transformers (the ``test`` extra) nothing is written and
    :data:`UNAVAILABLE` says why, so that the pages naming it skip with that reason."""
    try:
        import sentencepiece  # noqa: F401
        import transformers
    except ImportError as error:
        UNAVAILABLE[directory.name] = f"needs {error.name} to build (pip install -e '.[test]')"
        return
    from _marian import write_marian_tokenizer_dir

    write_marian_tokenizer_dir(directory, separate_vocabs=False, vocab_size=500, corpus="numbers")
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, activation_function="swish", scale_embedding=True,
        share_encoder_decoder_embeddings=True, pad_token_id=len(vocab) - 1,
        decoder_start_token_id=len(vocab) - 1, eos_token_id=0, forced_eos_token_id=None,
        max_position_embeddings=128,
    )  # fmt: skip
    import torch

    torch.manual_seed(0)
    transformers.MarianMTModel(config).eval().save_pretrained(directory)


def test_the_pages_have_examples_and_the_markers_are_well_formed():
    found = {page: blocks(page, (ROOT / page).read_text(encoding="utf-8")) for page in PAGES}
    assert any(b.lang == "python" for b in found["README.md"])
    assert any(b.lang in RUN_LANGUAGES - {"python"} for b in found["README.md"])
    for page_blocks in found.values():
        for block in page_blocks:
            assert block.skip is None or block.skip.strip(), f"{block.where}: no reason given"
            assert block.needs in (None, "cuda"), f"{block.where}: unknown needs: {block.needs}"


def test_the_user_guide_explains_every_key_of_a_job_file():
    """docs/guide.md's tables name every key each table of a job file takes, so a new key
    cannot go undocumented."""
    import dataclasses

    from attnlab import TransformerConfig
    from attnlab.jobs import EvalOptions, TokenizerOptions
    from attnlab.tasks import TASKS
    from attnlab.train import TrainConfig

    guide = (ROOT / "docs/guide.md").read_text(encoding="utf-8")
    tables = {
        "tokenizer": [TokenizerOptions], "model": [TransformerConfig], "train": [TrainConfig],
        "eval": [EvalOptions], "task": list(TASKS.values()),
    }  # fmt: skip
    for table, classes in tables.items():
        section = guide.split(f"### `[{table}]`", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
        keys = [f.name for options in classes for f in dataclasses.fields(options)]
        for key in EvalOptions.KEYS if table == "eval" else keys:  # [eval]: flat, as written
            if key != "out":  # train's run directory is --out, not a key
                assert f"`{key}`" in section, f"[{table}] {key}: not in docs/guide.md"


def test_blocks_and_markers_are_read_as_documented():
    text = (
        "<!-- file: a.toml -->\n\n```toml\nx = 1\n```\n\nprose\n<!-- no-test: needs network -->\n"
        "```bash\ncurl x \\\n  y  # a comment\n# only a comment\n```\n"
        "<!-- needs: cuda -->\nprose between\n```python\nprint(1)\n```\n"
    )
    a, b, c = blocks("p.md", text)
    assert (a.lang, a.file, a.code, a.line) == ("toml", "a.toml", "x = 1\n", 3)
    assert (b.lang, b.skip, len(commands(b.code))) == ("bash", "needs network", 1)
    assert shlex.split(commands(b.code)[0], comments=True) == ["curl", "x", "y"]
    assert c.needs is None  # prose between a marker and its block cancels it


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_example_of_the_page_runs(page, prepared, tmp_path, one_thread):
    text = (ROOT / page).read_text(encoding="utf-8")
    page_blocks = blocks(page, text)
    if not any(b.lang in RUN_LANGUAGES or b.file for b in page_blocks):
        pytest.skip(f"{page}: no examples")
    for name, reason in UNAVAILABLE.items():
        if name in text:
            pytest.skip(f"{page}: its examples use {name}, which {reason}")
    work = tmp_path / "work"
    shutil.copytree(prepared, work)
    skipped = []
    for block in page_blocks:
        if block.skip:
            skipped.append(f"{block.where}: {block.skip}")
            continue
        if block.needs == "cuda":
            import torch

            if not torch.cuda.is_available():
                skipped.append(f"{block.where}: needs CUDA")
                continue
        if block.file:
            target = work / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
        elif block.lang == "python":
            run_python(block, work)
        elif block.lang in ("bash", "sh"):
            run_shell(block, work)
    if skipped:
        print("not run:", *skipped, sep="\n  ")
