"""The documentation site's generated parts (tools/docs_hooks.py): the CLI reference covers every
command and argument of the real parser, the includes find what they name in README.md and
CONTRIBUTING.md, links are rewritten for the page they land on, and, marked slow, the real
``mkdocs build --strict``."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _helpers import subcommands
from attnlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _load_hooks():
    spec = importlib.util.spec_from_file_location(
        "attnlab_docs_hooks", ROOT / "tools/docs_hooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def _sections(page: str) -> dict[str, str]:
    """The CLI page cut at its command headings: command name -> its section's text."""
    found = list(re.finditer(r"^#{2,4} attnlab(?P<name>[\w -]*?) \{#[\w-]+\}$", page, re.M))
    assert found, "no command headings"
    return {
        m.group("name").strip(): page[
            m.end() : found[i + 1].start() if i + 1 < len(found) else None
        ]
        for i, m in enumerate(found)
    }


PAGE = hooks.cli_reference(build_parser())
SECTIONS = _sections(PAGE)
#: The commands the reference shows.
COMMANDS = dict(subcommands(build_parser()))


def test_every_command_of_the_parser_has_a_section():
    assert set(COMMANDS) | {""} == set(SECTIONS)
    for name in ("train", "translate", "evaluate", "viz attention", "viz curves", "predict"):
        assert name in SECTIONS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_argument_appears_in_its_command_section(name):
    parser, text = COMMANDS[name], SECTIONS[name]
    assert f"usage: attnlab {name}" in text
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices:
                assert f"(#attnlab-{name.replace(' ', '-')}-{child})" in text, (name, child)
            continue
        if action.help == argparse.SUPPRESS:
            continue
        row = next(
            (
                line
                for line in text.splitlines()
                if line.startswith("| `")
                and all(
                    re.search(f"`{re.escape(flag)}[ `]", line.split(" | ")[0])
                    for flag in action.option_strings
                )
                and (action.option_strings or f"`{action.metavar or action.dest}`" in line)
            ),
            None,
        )
        assert row is not None, (name, action.dest)
        if action.help:
            # The help's words are in the row (Markdown escapes aside).
            for word in re.findall(r"[A-Za-z]{4,}", action.help)[:6]:
                assert word in row, (name, action.dest, word)
        default = action.default
        if isinstance(action, argparse.BooleanOptionalAction) and isinstance(default, bool):
            # --causal / --no-causal: the default is the flag that gives it.
            flag = action.option_strings[0] if default else action.option_strings[-1]
            assert row.split(" | ")[2] == f"`{flag}`", (name, action.dest, flag)
        elif isinstance(default, bool):
            assert row.split(" | ")[2] == ("on" if default else "off"), (name, action.dest)
        elif default != argparse.SUPPRESS and isinstance(default, (int, float, str)):
            assert f"`{default}`" in row, (name, action.dest, default)
        for choice in action.choices or ():
            assert f"`{choice}`" in row, (name, action.dest, choice)


def _toy_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnlab", description="toy")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", aliases=["go"], help="run [it] *now*", description="Run <it>.")
    run.add_argument("--steps", type=int, default=7, help="steps (default %(default)s)")
    run.add_argument("--mode", choices=["a", "b"], default="a", help="`--mode` picks")
    run.add_argument("--flag", action=argparse.BooleanOptionalAction, default=True, help="f")
    deep = run.add_subparsers(dest="what").add_parser("deeper", help="one level down")
    deep.add_argument("paths", nargs="+", help="files")
    return parser


def test_the_generator_on_a_toy_parser():
    page = hooks.cli_reference(_toy_parser())
    sections = _sections(page)
    assert set(sections) == {"", "run", "run deeper"}  # the alias is one command, listed once
    assert "Also: `go`." in sections["run"]
    assert "steps (default 7)" in sections["run"]  # %(default)s expanded as --help does
    assert "Run &lt;it&gt;." in sections["run"] or "Run &lt;it>." in sections["run"]
    assert r"run \[it\] \*now\*" in sections[""]  # no link, no emphasis out of help text
    assert "`--mode` picks" in sections["run"]  # backquotes stay code
    assert "| `--flag`, `--no-flag` | f | `--flag` |" in sections["run"]
    assert "(#attnlab-run-deeper)" in sections["run"]
    assert "| `paths` | files |" in sections["run deeper"]


README = """# Title

intro [the limits](docs/serve.md#limits) and ![a picture](docs/img/a.png)

## Quick start

```sh
# not a heading: a comment in a code block
make demo
```

## Using it

see [Reliability](#reliability), [the guide](CONTRIBUTING.md), [a script](benchmarks/x.py),
`[not a link](docs/x.md)` and [a site](https://example.org).

### Sub

text

## Reliability

holds
"""


def test_section_ends_at_the_next_heading_of_its_level_and_skips_code():
    quick = hooks.section(README, "## Quick start", None, "README.md")
    assert quick.startswith("## Quick start") and "make demo" in quick and "Using" not in quick
    using = hooks.section(README, "## Using it", None, "README.md")
    assert "### Sub" in using and "## Reliability" not in using
    top = hooks.section(README, "# Title", "## Using it", "README.md")
    assert "make demo" in top and "Using it" not in top
    assert hooks.section(README, None, None, "README.md") == README
    with pytest.raises(ValueError, match=r"README.md: no heading '## Missing'"):
        hooks.section(README, "## Missing", None, "README.md")
    with pytest.raises(ValueError, match="does not come after"):
        hooks.section(README, "## Using it", "## Quick start", "README.md")


def test_links_are_rewritten_for_the_page_they_land_on():
    site = hooks.Site(
        "docs",
        files={"CONTRIBUTING.md": "contributing.md"},
        anchors={("README.md", "reliability"): "reliability.md"},
    )
    text = hooks.section(README, "# Title", None, "README.md")
    out = hooks.rewrite_links(text, "README.md", "guide/usage.md", site)
    assert "[the limits](../serve.md#limits)" in out
    assert "![a picture](../img/a.png)" in out
    assert "[Reliability](../reliability.md#reliability)" in out
    assert "[the guide](../contributing.md)" in out
    assert "a script (`benchmarks/x.py` in the repository)" in out
    assert "`[not a link](docs/x.md)`" in out  # code is left alone
    assert "[a site](https://example.org)" in out
    # An anchor on the page that holds it stays as it is.
    same = hooks.rewrite_links("[R](#reliability)", "README.md", "reliability.md", site)
    assert same == "[R](#reliability)"


def test_plan_maps_files_and_headings_to_the_pages_that_include_them(tmp_path):
    pytest.importorskip("pymdownx")
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    (tmp_path / "README.zh.md").write_text(
        "# 中文\n\n[English](README.md)、[可靠性](README.md#reliability)、[下面](#快速开始)\n\n"
        "## 快速开始\n",
        encoding="utf-8",
    )
    pages = {
        "index.md": '<!-- include README.md "# Title" to "## Using it" -->\n',
        "guide.md": '# Guide\n\n<!-- include README.md "## Using it" -->\n',
        "more/reliability.md": '<!-- include README.md "## Reliability" -->\n',
        "zh.md": "<!-- include README.zh.md -->\n",
    }
    site = hooks.plan(tmp_path, "docs", pages)
    # A link to a file lands where its top is included; one to a heading, where that heading is.
    assert site.files == {"README.md": "index.md", "README.zh.md": "zh.md"}
    assert site.anchors[("README.md", "reliability")] == "more/reliability.md"
    assert site.anchors[("README.md", "sub")] == "guide.md"
    assert site.anchors[("README.zh.md", "快速开始")] == "zh.md"  # GitHub's anchors: Chinese kept
    out = hooks.include(pages["zh.md"], "zh.md", tmp_path, site)
    assert "[English](index.md)" in out
    assert "[可靠性](more/reliability.md#reliability)" in out
    assert "[下面](#快速开始)" in out
    guide = hooks.include(pages["guide.md"], "guide.md", tmp_path, site)
    assert "[Reliability](more/reliability.md#reliability)" in guide
    assert "the guide (`CONTRIBUTING.md` in the repository)" in guide  # no page holds it
    with pytest.raises(ValueError, match=r"docs/x\.md: the included file MISSING\.md does not"):
        hooks.include("<!-- include MISSING.md -->", "docs/x.md", tmp_path, site)


def test_every_include_of_the_docs_finds_what_it_names():
    includes = [
        (page, match)
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for match in hooks.INCLUDE.finditer(page.read_text(encoding="utf-8"))
    ]
    assert len(includes) >= 2  # the first page includes README.md, another CONTRIBUTING.md
    for page, match in includes:
        source = ROOT / match.group("path")
        assert source.is_file(), (page, match.group(0))
        part = hooks.section(
            source.read_text(encoding="utf-8"),
            match.group("start"),
            match.group("end"),
            str(source),
        )
        assert part.strip(), (page, match.group(0))


def test_the_quick_start_page_keeps_the_two_commands():
    index = (ROOT / "docs/index.md").read_text(encoding="utf-8")
    match = hooks.INCLUDE.search(index)
    readme = (ROOT / match.group("path")).read_text(encoding="utf-8")
    part = hooks.section(readme, match.group("start"), match.group("end"), "README.md")
    assert "## Quick start" in part and "make demo" in part and "make test" in part


def test_every_public_module_gets_an_api_page():
    modules = hooks.api_modules()
    for name in (
        "nn.attention", "nn.masks", "nn.positional", "nn.layers", "models.transformer",
        "models.config", "decode.search", "formats", "formats.marian", "train", "tasks",
        "inference.scores", "instruments.flops", "instruments.viz", "instruments.explain", "serve",
    ):  # fmt: skip
        assert name in modules
    assert "cli" not in modules and len(modules) == len(set(modules))
    assert hooks.api_page("nn.masks") == "::: attnlab.nn.masks\n"


def test_the_exports_page_names_everything_attnlab_exports():
    import attnlab

    page = hooks.exports_reference()
    for name in attnlab.__all__:
        assert f"`{name}`" in page or f"`attnlab.{name}`" in page, name


def test_sphinx_roles_are_dropped_before_code_spans():
    html = "see :class:<code>Tokenizer</code> and :meth:<code>load</code>; a:b: stays"
    assert hooks.strip_roles(html) == "see <code>Tokenizer</code> and <code>load</code>; a:b: stays"


@pytest.mark.slow
def test_mkdocs_builds_the_site_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cli = (tmp_path / "site/cli.html").read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f'id="attnlab-{name.replace(" ", "-")}"' in cli, name
    assert (tmp_path / "site/api/nn.masks.html").is_file()  # attnlab.nn.masks's page
