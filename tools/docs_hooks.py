"""The documentation site's build-time pages and includes (mkdocs hooks, see mkdocs.yml).

Nothing here is copied by hand, so nothing can drift from the code or the README:

* ``cli.md``, the CLI reference, is written from the real argparse parsers
  (:func:`attnlab.cli.build_parser`): every command and nested command, its usage, and every
  argument with its help, default and choices (:func:`cli_reference`).
* ``api/index.md`` lists what ``import attnlab`` exports, each linked to the page that
  documents it (:func:`exports_reference`), and ``api/MODULE.md`` documents each public module
  from its docstrings (:func:`api_modules`; the nav's "API reference" section is filled in).
* The Sphinx roles of the docstrings (:class:`Name`, :func:`name`) render as the code span
  alone (:func:`strip_roles`).
* The Chinese README (README.zh.md) becomes the page ``zh.md``, first in the nav's Chinese
  section (mkdocs.yml's ``中文 (Chinese)``), and a translated explain report
  (``docs/explain/report.zh.md``) joins the nav beside the English one, once they exist
  (:func:`on_config`).
* A page line ``<!-- include FILE "HEADING" to "HEADING" -->`` (path relative to the
  repository root; both headings optional) is replaced by that part of FILE: from the first
  heading up to the second, or to the next heading of the same or a higher level, or the whole
  file. Relative links in the included text are rewritten for the page they land on: a link
  into docs/ points there, a link to an included file or to an included heading points to the
  page that includes it, and a link to any other repository file becomes plain text naming the
  path (the site has no copy of it) (:func:`include`).

The functions below import neither mkdocs nor markdown, so tests run without the docs extra;
the ``on_*`` functions at the end are the hooks mkdocs calls.
"""

from __future__ import annotations

import argparse
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ``<!-- include README.md "## Quick start" to "## Using it" -->``
INCLUDE = re.compile(
    r'^<!-- include (?P<path>\S+)(?: "(?P<start>[^"]+)")?(?: to "(?P<end>[^"]+)")? -->[ \t]*$',
    re.MULTILINE,
)
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: A Markdown link or image target: ``[text](target)`` / ``![alt](target)``.
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
#: A Sphinx role before a rendered code span (docstrings here write :class:`Name`).
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj|const):(?=<code)")


# --- the CLI reference ---------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of the parser tree: ``name`` is its words after ``attnlab`` ("" for the
    program itself), ``help`` the line its parent's listing gives it."""

    name: str
    parser: argparse.ArgumentParser
    help: str
    aliases: tuple[str, ...] = ()


def walk_commands(
    parser: argparse.ArgumentParser, prefix: str = "", help: str = ""
) -> Iterator[Command]:
    """Yield ``parser`` and every command below it, depth first, in the parser's order.

    A parser registered under several names (aliases) is yielded once, under its first name."""
    yield Command(prefix.strip(), parser, help)
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        names: dict[int, list[str]] = {}
        for name, sub in action.choices.items():
            names.setdefault(id(sub), []).append(name)
        for name, sub in action.choices.items():
            own = names[id(sub)]
            if name != own[0]:
                continue  # an alias
            for command in walk_commands(sub, f"{prefix}{name} ", helps.get(name, "")):
                if command.parser is sub:
                    command = Command(command.name, sub, command.help, tuple(own[1:]))
                yield command


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    # A fixed width: the page must not depend on the terminal that built it.
    return argparse.HelpFormatter(parser.prog, width=100, max_help_position=40)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return _formatter(parser)._expand_help(action)


def _text(text: str) -> str:
    """Help text as Markdown: backquoted spans stay code; outside them the characters that
    Markdown would read as markup (``[`` links, ``*`` / ``_`` emphasis, ``<`` HTML) are
    escaped, so the page shows what ``--help`` shows."""

    def escape(plain: str) -> str:
        return re.sub(r"([\\[\]*_])", r"\\\1", plain).replace("<", "&lt;")

    out, position = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [escape(text[position : span.start()]), span.group(0)]
        position = span.end()
    out.append(escape(text[position:]))
    return "".join(out)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    text = _cell(text)
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _default(action: argparse.Action) -> str:
    if action.default is None or action.default == argparse.SUPPRESS:
        return ""
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return ""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "on" if action.default else "off"
    if isinstance(action, argparse.BooleanOptionalAction):
        return _code(action.option_strings[0] if action.default else action.option_strings[-1])
    if isinstance(action.default, (list, tuple)):
        return _code(" ".join(str(v) for v in action.default))
    return _code(str(action.default))


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        metavar = ""
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            if isinstance(metavar, tuple):
                metavar = " ".join(metavar)
            metavar = f" {metavar}"
        return ", ".join(_code(flag + metavar) for flag in action.option_strings)
    metavar = action.metavar or action.dest
    return _code(metavar if isinstance(metavar, str) else " ".join(metavar))


def _anchor(command: Command) -> str:
    return "attnlab-" + command.name.replace(" ", "-") if command.name else "attnlab"


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """The CLI reference page (Markdown) of ``parser`` and every command below it.

    Each command gets a heading (``attnlab train``), its description, its usage block, the
    commands below it (linked) and a table of its arguments: flags or name, help (with
    ``%(default)s`` expanded as ``--help`` shows it), default and choices."""
    lines = [
        "# Command line",
        "",
        "Written from the parsers of `attnlab` at build time (`tools/docs_hooks.py`): what "
        "`attnlab COMMAND --help` prints, every command on one page.",
        "",
    ]
    for command in walk_commands(parser):
        title = f"attnlab {command.name}".strip()
        level = "#" * min(2 + command.name.count(" "), 4)
        lines += [f"{level} {title} {{#{_anchor(command)}}}", ""]
        if command.aliases:
            lines += ["Also: " + ", ".join(_code(a) for a in command.aliases) + ".", ""]
        about = command.parser.description or command.help
        if about:
            lines += [_text(about.strip()), ""]
        lines += ["```text", _usage(command.parser), "```", ""]
        children = [c for c in walk_commands(command.parser) if c.name.count(" ") == 0 and c.name]
        if children:
            lines += ["| command | what it does |", "|---|---|"]
            for child in children:
                full = Command(f"{command.name} {child.name}".strip(), child.parser, child.help)
                link = f"[`{_cell(full.name)}`](#{_anchor(full)})"
                lines.append(f"| {link} | {_cell(_text(child.help))} |")
            lines.append("")
        rows = [
            action
            for action in command.parser._actions
            if not isinstance(action, argparse._SubParsersAction)
            and action.help != argparse.SUPPRESS
        ]
        if rows:
            lines += ["| argument | help | default | choices |", "|---|---|---|---|"]
            for action in rows:
                choices = ""
                if action.choices is not None:
                    choices = ", ".join(_code(str(c)) for c in action.choices)
                lines.append(
                    f"| {_argument(action)} | {_cell(_text(_help(command.parser, action)))} "
                    f"| {_default(action)} | {choices} |"
                )
            lines.append("")
        if command.parser.epilog:
            lines += [_text(command.parser.epilog.strip()), ""]
    return "\n".join(lines)


# --- the API reference ------------------------------------------------------------------------

#: The order of the API pages (the way data flows); a public module not named here follows,
#: alphabetically, so a new module gets its page without an edit here.
API_ORDER = (
    "nn.masks", "nn.attention", "nn.positional", "nn.layers", "nn.cache", "nn.torch_nn",
    "models.config", "models.embeddings", "models.transformer", "models.saved", "models.vision",
    "decode.search", "decode.constraints", "decode.session", "decode.fast",
    "inference.translator", "inference.modeldir", "inference.scores", "inference.bounds",
    "formats", "formats.marian", "formats.ctranslate2", "formats.bert",
    "data", "tasks", "train", "jobs",
    "instruments.flops", "instruments.viz", "instruments.explain", "serve",
)  # fmt: skip
#: Public modules without a page here: the command line has its own (cli.md).
API_SKIP = frozenset({"cli"})
#: The packages whose modules have a page each; those in GROUPS_ONLY only group modules and
#: have no page of their own.
GROUPS = frozenset({"nn", "models", "decode", "inference", "formats", "instruments"})
GROUPS_ONLY = GROUPS - {"formats"}


def api_modules() -> list[str]:
    """The public modules of attnlab (no leading underscore), in page order: the modules of
    the packages that group them (``nn.masks``), and the packages documented whole (``data``,
    ``train``, ...)."""
    import importlib
    import pkgutil

    import attnlab

    found = set()
    for info in pkgutil.iter_modules(attnlab.__path__):
        if info.name.startswith("_") or info.name in API_SKIP:
            continue
        if info.name in GROUPS:
            package = importlib.import_module(f"attnlab.{info.name}")
            found |= {
                f"{info.name}.{sub.name}"
                for sub in pkgutil.iter_modules(package.__path__)
                if not sub.name.startswith("_") and sub.name != "common"
            }
        if info.name not in GROUPS_ONLY:
            found.add(info.name)
    return [m for m in API_ORDER if m in found] + sorted(found - set(API_ORDER))


def api_page(module: str) -> str:
    """The page of ``attnlab.<module>``: its docstring and public members (mkdocstrings)."""
    return f"::: attnlab.{module}\n"


# --- what `import attnlab` exports ----------------------------------------------------------


def exports_reference() -> str:
    """The API index: the package docstring, then each name of ``attnlab.__all__`` linked
    (a mkdocstrings cross-reference) to where it is defined and documented."""
    import inspect

    import attnlab

    lines = [
        "# API reference",
        "",
        "::: attnlab",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "",
        "## What `import attnlab` gives",
        "",
        "| name | defined in |",
        "|---|---|",
    ]
    for name in attnlab.__all__:
        value = getattr(attnlab, name)
        if inspect.ismodule(value):
            where = value.__name__
            lines.append(f"| [`attnlab.{name}`][{where}] | module `{where}` |")
        elif inspect.isclass(value) or inspect.isfunction(value):
            where = f"{value.__module__}.{value.__qualname__}"
            lines.append(f"| [`{name}`][{where}] | `{value.__module__}` |")
        else:
            lines.append(f"| `{name}` | `{type(value).__name__}` value |")
    lines.append("")
    return "\n".join(lines)


# --- includes -------------------------------------------------------------------------------


def headings(text: str) -> Iterator[tuple[int, int, str]]:
    """``(line index, level, title)`` of each ATX heading of ``text`` outside fenced code."""
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            yield index, len(match.group(1)), match.group(2)


def _find(text: str, heading: str, source: str) -> tuple[int, int]:
    match = HEADING.match(heading)
    if not match:
        raise ValueError(f"{source}: {heading!r} is not a Markdown heading (expected '## Title')")
    level, title = len(match.group(1)), match.group(2)
    for index, found_level, found_title in headings(text):
        if found_level == level and found_title == title:
            return index, level
    raise ValueError(f"{source}: no heading {heading!r}")


def section(text: str, start: str | None, end: str | None, source: str) -> str:
    """The part of ``text`` from heading ``start`` up to heading ``end`` (or the next heading
    of the same or a higher level); all of it when ``start`` is None."""
    lines = text.splitlines()
    if start is None:
        return text
    first, level = _find(text, start, source)
    if end is not None:
        last, _ = _find(text, end, source)
        if last <= first:
            raise ValueError(f"{source}: {end!r} does not come after {start!r}")
    else:
        last = next((i for i, lvl, _ in headings(text) if i > first and lvl <= level), len(lines))
    return "\n".join(lines[first:last]).rstrip() + "\n"


def _outside_code(text: str, replace: Any) -> str:
    """Apply ``replace`` (str -> str) to the parts of ``text`` outside code fences/spans."""
    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        if fenced:
            out.append(line)
            continue
        parts, position = [], 0
        for span in CODE_SPAN.finditer(line):
            parts.append(replace(line[position : span.start()]))
            parts.append(span.group(0))
            position = span.end()
        parts.append(replace(line[position:]))
        out.append("".join(parts))
    return "".join(out)


@dataclass
class Site:
    """Where included text lands: ``files`` maps a repository file included whole to the page
    (docs-relative) including it; ``anchors`` maps ``(repository file, anchor)`` to the page
    holding that heading."""

    docs: str  # the docs folder, relative to the repository root ("docs")
    files: dict[str, str]
    anchors: dict[tuple[str, str], str]


def slugify(title: str) -> str:
    """The anchor of a heading, as mkdocs.yml's toc makes it: GitHub's way (lower case, Chinese
    kept), so README.zh.md's anchors are the same here and on GitHub."""
    from pymdownx.slugs import slugify as slugs

    return str(slugs(case="lower")(title, "-"))


def plan(root: Path, docs: str, pages: dict[str, str]) -> Site:
    """Read every include of ``pages`` (docs-relative path -> Markdown) and note where each
    included file and heading lands."""
    site = Site(docs, {}, {})
    for page, text in pages.items():
        for match in INCLUDE.finditer(text):
            path = match.group("path")
            source = (root / path).read_text(encoding="utf-8")
            start = match.group("start")
            first = next((f"{'#' * lvl} {title}" for _, lvl, title in headings(source)), None)
            if start is None or start == first:
                site.files.setdefault(path, page)  # a link to the file lands on its top
            part = section(source, start, match.group("end"), path)
            for _, _, title in headings(part):
                site.anchors.setdefault((path, slugify(title)), page)
    return site


def rewrite_links(text: str, source: str, page: str, site: Site) -> str:
    """Relative links of ``text`` (from repository file ``source``) made right for ``page``."""
    page_dir = posixpath.dirname(page)

    def target_for(target: str) -> str | None:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("/"):
            return target  # a URL, or site-absolute
        path, _, anchor = target.partition("#")
        if not path:
            where = site.anchors.get((source, anchor))
            if where is None or where == page:
                return target
            return f"{posixpath.relpath(where, page_dir or '.')}#{anchor}"
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        suffix = f"#{anchor}" if anchor else ""
        if anchor and (repo_path, anchor) in site.anchors:
            where = site.anchors[(repo_path, anchor)]
            return posixpath.relpath(where, page_dir or ".") + suffix
        if repo_path.startswith(site.docs + "/"):
            in_docs = repo_path[len(site.docs) + 1 :]
            return posixpath.relpath(in_docs, page_dir or ".") + suffix
        if repo_path in site.files:
            where = site.files[repo_path]
            return posixpath.relpath(where, page_dir or ".") + suffix
        return None  # a repository file the site has no copy of

    def replace(chunk: str) -> str:
        def one(match: re.Match[str]) -> str:
            target = target_for(match.group("target"))
            if target is None:
                path = match.group("target").partition("#")[0]
                return f"{match.group('text')} (`{path}` in the repository)"
            return f"{match.group('bang')}[{match.group('text')}]({target})"

        return LINK.sub(one, chunk)

    return _outside_code(text, replace)


def include(text: str, page: str, root: Path, site: Site) -> str:
    """``text`` (the Markdown of ``page``) with each include line replaced by what it names."""

    def one(match: re.Match[str]) -> str:
        path = match.group("path")
        file = root / path
        if not file.is_file():
            raise ValueError(f"{page}: the included file {path} does not exist")
        part = section(
            file.read_text(encoding="utf-8"), match.group("start"), match.group("end"), path
        )
        return rewrite_links(part, path, page, site).rstrip("\n")

    return INCLUDE.sub(one, text)


def strip_roles(html: str) -> str:
    """``html`` without the Sphinx role names written before code spans (``:class:`` ...)."""
    return ROLE.sub("", html)


# --- the mkdocs hooks ----------------------------------------------------------------------

_site: Site | None = None


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


#: The Chinese README, once it exists, is the page zh.md (included whole).
ZH_README = "README.zh.md"
ZH_PAGE = "zh.md"
#: The nav's section of Chinese pages (mkdocs.yml), where the Chinese README goes first.
ZH_SECTION = "中文 (Chinese)"
#: The explain report in another language (report.zh.md), once it exists, sits beside report.md.
REPORT = "explain/report.md"


def on_config(config: Any) -> Any:
    """Fill the nav in: one "API reference" entry per public module; the Chinese README and
    the translated explain reports where they exist."""
    from mkdocs.exceptions import PluginError

    nav = config["nav"] or []
    for entry in nav:
        if isinstance(entry, dict) and "API reference" in entry:
            entry["API reference"] = ["api/index.md"] + [
                {f"attnlab.{m}": f"api/{m}.md"} for m in api_modules()
            ]
            break
    else:
        raise PluginError("mkdocs.yml: the nav has no 'API reference' section for the API pages")
    docs = Path(config["docs_dir"])
    translations = sorted(p.name for p in (docs / REPORT).parent.glob("report.*.md"))
    if translations:
        for index, entry in enumerate(nav):
            if isinstance(entry, dict) and list(entry.values()) == [REPORT]:
                title = next(iter(entry))
                languages = [{"English": REPORT}]
                languages += [
                    {"中文" if name == "report.zh.md" else name: f"explain/{name}"}
                    for name in translations
                ]
                nav[index] = {title: languages}
    if (_root(config) / ZH_README).is_file():
        chinese = next((e for e in nav if isinstance(e, dict) and ZH_SECTION in e), None)
        if chinese is not None and isinstance(chinese[ZH_SECTION], list):
            chinese[ZH_SECTION].insert(0, {"快速开始 (README)": ZH_PAGE})  # the section's first
        else:
            nav.insert(1, {ZH_SECTION: ZH_PAGE})  # beside the quick start
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    from attnlab.cli import build_parser

    global _site
    files.append(File.generated(config, "cli.md", content=cli_reference(build_parser())))
    files.append(File.generated(config, "api/index.md", content=exports_reference()))
    for module in api_modules():
        files.append(File.generated(config, f"api/{module}.md", content=api_page(module)))
    if (_root(config) / ZH_README).is_file():
        files.append(File.generated(config, ZH_PAGE, content=f"<!-- include {ZH_README} -->\n"))
    root = _root(config)
    docs = Path(config["docs_dir"]).resolve().relative_to(root).as_posix()
    pages = {f.src_uri: f.content_string for f in files if f.src_uri.endswith(".md")}
    try:
        _site = plan(root, docs, pages)
    except (OSError, ValueError) as error:
        raise PluginError(f"include: {error}") from None
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    if _site is None or not INCLUDE.search(markdown):
        return markdown
    try:
        return include(markdown, page.file.src_uri, _root(config), _site)
    except (OSError, ValueError) as error:
        raise PluginError(f"include: {error}") from None


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return strip_roles(html)
