"""The Chinese pages say what their English originals say (issue 26, sec. 7).

Each translated page is compared with its English page on what a translation must not change,
so that an edit to one page fails this test until the other follows:

* **Sections**: the headings (outside fenced code) in order, compared as their levels: the
  same sequence of levels, hence the same count at each level. Titles are translated, so
  their text is not compared.
* **Code blocks**: the fenced blocks in order, with the same language tag and the same content.
  Comments may be translated: in ``bash``, ``sh``, ``python`` and ``toml`` blocks a comment
  (``#`` at the start of a line, or after white space, outside quotes; for Python, what the
  tokenizer calls a comment) is removed before comparing, with trailing white space, and a
  line holding only a comment is dropped. Other blocks (``text``, ``json``, unlabelled) are
  compared as they stand: they show a program's output or a format.
* **Numbers**: the multiset of numbers in the prose and the tables, that is the text outside
  fenced code blocks, HTML comments and link targets (``(...)`` after ``]``), inline code
  spans included. A number is a run of ASCII digits, with ``,`` thousands separators (a comma
  followed by exactly three digits: ``1,014`` counts as 1014, ``0,1`` as 0 and 1) and ``.``
  decimal parts (``38.63``, ``2.13.0``), wherever it stands: ``T3`` gives 3, ``97.8%`` gives
  97.8, ``1e-5`` gives 1 and 5, ``8x8`` gives 8 twice. Exempt: link targets (paths and anchors
  are not shown; a Chinese page links ``guide.zh.md`` where the English links ``guide.md``),
  HTML comments (the test markers) and fenced code (compared above). Numbers written as words
  ("three", "三") are not numbers here: write a count in digits on both sides, or in words on
  both.
* **Inline code**: the set of inline code spans (`` `attnlab train` ``, `` `--max-steps` ``,
  `` `[task]` ``, ...; white space inside one, a line break included, read as one space):
  commands, flags, keys, values and messages are not translated. All spans are compared, not
  only those that look like commands, since a key or a route renamed is as much a change.

A failure names the page pair, what differs, and on which side it is missing.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: (English page, Chinese page), relative to the repository root.
PAIRS = [
    ("README.md", "README.zh.md"),
    ("docs/guide.md", "docs/guide.zh.md"),
    ("docs/serve.md", "docs/serve.zh.md"),
    ("docs/deploy.md", "docs/deploy.zh.md"),
    ("docs/explain.md", "docs/explain.zh.md"),
    ("docs/terminology.md", "docs/terminology.zh.md"),
    ("docs/distillation.md", "docs/distillation.zh.md"),
    ("docs/pretrained.md", "docs/pretrained.zh.md"),
    ("docs/python.md", "docs/python.zh.md"),
    ("docs/export.md", "docs/export.zh.md"),
    ("docs/gpu.md", "docs/gpu.zh.md"),
    ("docs/reliability.md", "docs/reliability.zh.md"),
]
#: (English page, Chinese page) where the Chinese page holds the English page's result tables
#: alone, under translated headings with a short introduction: each table of either page must
#: equal a table of the other in numbers and inline code (its words are translated).
TABLE_PAIRS = [
    ("docs/benchmarks.md", "docs/benchmarks.zh.md"),
]
FENCE = re.compile(r"^\s*(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+\S")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: ``](target)``: a link's or an image's target (not shown on the page).
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
#: An inline code span; as in Markdown, it may run over a line break but not a blank line.
CODE_SPAN = re.compile(r"(`+)(?P<code>(?:(?!\n[ \t]*\n)[^`])+?)\1")
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)*|\d+(?:\.\d+)*")
#: Blocks whose ``#`` comments may be translated.
COMMENTED = {"bash", "sh", "python", "toml"}


@dataclass(frozen=True)
class Page:
    """What a translation keeps of one page."""

    headings: list[tuple[int, str]]  # (level, line as written)
    code: list[tuple[str, str, int]]  # (language, content without comments, line of the fence)
    numbers: Counter[str]
    spans: set[str]


def strip_comments(lang: str, code: str) -> str:
    """``code`` without its comments (see the module docstring), for ``lang`` in COMMENTED."""
    if lang == "python":
        return _strip_python_comments(code)
    kept = []
    for line in code.splitlines():
        stripped = _strip_shell_comment(line).rstrip()
        if stripped or not line.strip():
            kept.append(stripped)
    return "\n".join(kept)


def _strip_shell_comment(line: str) -> str:
    """``line`` up to its ``#`` comment: a ``#`` at the start or after white space, outside
    quotes (bash's rule, and close enough to TOML's for the pages' files)."""
    quote, index = None, 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1  # an escaped character cannot end the string
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
        index += 1
    return line


def _strip_python_comments(code: str) -> str:
    lines = code.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return "\n".join(_strip_shell_comment(line).rstrip() for line in lines)
    for token in reversed([t for t in tokens if t.type == tokenize.COMMENT]):
        row, column = token.start
        lines[row - 1] = lines[row - 1][:column]
    only_comment = {t.start[0] for t in tokens if t.type == tokenize.COMMENT and t.line.strip()}
    only_comment = {row for row in only_comment if not lines[row - 1].strip()}
    return "\n".join(line.rstrip() for row, line in enumerate(lines, 1) if row not in only_comment)


def read(text: str) -> Page:
    """The headings, code blocks, numbers and inline code spans of Markdown ``text``."""
    headings: list[tuple[int, str]] = []
    code: list[tuple[str, str, int]] = []
    prose: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if fence:
            closing, body, start = fence.group("fence"), [], index + 1
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(closing):
                body.append(lines[index])
                index += 1
            lang = fence.group("lang").lower()
            content = "\n".join(body)
            if lang in COMMENTED:
                content = strip_comments(lang, content)
            code.append((lang, content.rstrip("\n"), start))
        else:
            heading = HEADING.match(line)
            if heading:
                headings.append((len(heading.group("hashes")), line))
            prose.append(line)
        index += 1
    shown = LINK_TARGET.sub("]", HTML_COMMENT.sub(" ", "\n".join(prose)))
    numbers = Counter(n.replace(",", "") for n in NUMBER.findall(shown))
    spans = {" ".join(m.group("code").split()) for m in CODE_SPAN.finditer(shown)}
    return Page(headings, code, numbers, spans)


def differences(english_name: str, english: str, chinese_name: str, chinese: str) -> list[str]:
    """What differs between the two pages' kept parts, one line each (empty: nothing)."""
    en, zh = read(english), read(chinese)
    found: list[str] = []
    pair = f"{english_name} / {chinese_name}"
    en_levels = [level for level, _ in en.headings]
    zh_levels = [level for level, _ in zh.headings]
    if en_levels != zh_levels:
        for position, (a, b) in enumerate(zip(en.headings, zh.headings, strict=False), 1):
            if a[0] != b[0]:
                found.append(
                    f"{pair}: heading {position} is level {a[0]} in {english_name} ({a[1]!r})"
                    f" but level {b[0]} in {chinese_name} ({b[1]!r})"
                )
                break
        else:
            found.append(
                f"{pair}: {len(en.headings)} headings in {english_name}, "
                f"{len(zh.headings)} in {chinese_name}; the first extra: "
                f"{(en.headings[len(zh.headings) :] or zh.headings[len(en.headings) :])[0][1]!r}"
            )
    if len(en.code) != len(zh.code):
        found.append(
            f"{pair}: {len(en.code)} code blocks in {english_name}, {len(zh.code)} in "
            f"{chinese_name}"
        )
    for (lang_en, code_en, line_en), (lang_zh, code_zh, line_zh) in zip(
        en.code, zh.code, strict=False
    ):
        where = f"{english_name}:{line_en} / {chinese_name}:{line_zh}"
        if lang_en != lang_zh:
            found.append(f"{pair}: code block {where}: language {lang_en!r} vs {lang_zh!r}")
        elif code_en != code_zh:
            lines = zip_longest(code_en.splitlines(), code_zh.splitlines(), fillvalue="")
            diff = next(((a, b) for a, b in lines if a != b), ("", ""))
            found.append(
                f"{pair}: code block {where} differs (comments aside): "
                f"{english_name} has {diff[0]!r}, {chinese_name} has {diff[1]!r}"
            )
    for number in sorted((en.numbers - zh.numbers).keys()):
        count = (en.numbers - zh.numbers)[number]
        found.append(f"{pair}: the number {number} is missing in {chinese_name} ({count}x)")
    for number in sorted((zh.numbers - en.numbers).keys()):
        count = (zh.numbers - en.numbers)[number]
        found.append(f"{pair}: the number {number} is missing in {english_name} ({count}x)")
    for span in sorted(en.spans - zh.spans):
        found.append(f"{pair}: the inline code `{span}` is missing in {chinese_name}")
    for span in sorted(zh.spans - en.spans):
        found.append(f"{pair}: the inline code `{span}` is missing in {english_name}")
    return found


def tables(text: str) -> list[tuple[int, Counter[str], frozenset[str]]]:
    """Each Markdown table of ``text`` outside fenced code: (its first line, its numbers, its
    inline code spans), read as :func:`read` reads a page's prose."""
    found, lines, in_code, start = [], [*text.splitlines(), ""], False, None
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_code = not in_code
        is_row = not in_code and line.lstrip().startswith("|")
        if is_row and start is None:
            start = number
        elif not is_row and start is not None:
            page = read("\n".join(lines[start - 1 : number - 1]))
            found.append((start, page.numbers, frozenset(page.spans)))
            start = None
    return found


def table_differences(english_name: str, english: str, chinese_name: str, chinese: str):
    """The tables of one page that match no table of the other, one line each."""
    en, zh = tables(english), tables(chinese)
    found = []
    for (name, side), (other_name, other) in (
        ((chinese_name, zh), (english_name, en)),
        ((english_name, en), (chinese_name, zh)),
    ):
        kept = [(numbers, spans) for _, numbers, spans in other]
        found += [
            f"{english_name} / {chinese_name}: the table at {name}:{line} matches no table of "
            f"{other_name} (numbers and inline code)"
            for line, numbers, spans in side
            if (numbers, spans) not in kept
        ]
    return found


@pytest.mark.parametrize(("english", "chinese"), TABLE_PAIRS, ids=[zh for _, zh in TABLE_PAIRS])
def test_the_chinese_tables_match_the_english_ones(english, chinese):
    en_text = (ROOT / english).read_text(encoding="utf-8")
    zh_text = (ROOT / chinese).read_text(encoding="utf-8")
    found = table_differences(english, en_text, chinese, zh_text)
    assert not found, "\n".join(found)


def test_a_drifted_table_fails():
    english = "# T\n\nProse 7.\n\n| run | `--steps` |\n|---|---|\n| a | 1,200 |\n"
    chinese = "# 表\n\n| 运行 | `--steps` |\n|---|---|\n| a | 1200 |\n"
    assert table_differences("en.md", english, "zh.md", chinese) == []
    [a, b] = table_differences("en.md", english, "zh.md", chinese.replace("1200", "1500"))
    assert a == (
        "en.md / zh.md: the table at zh.md:3 matches no table of en.md (numbers and inline code)"
    )
    assert b.startswith("en.md / zh.md: the table at en.md:5 matches no table of zh.md")


@pytest.mark.parametrize(("english", "chinese"), PAIRS, ids=[zh for _, zh in PAIRS])
def test_the_chinese_page_matches_the_english_one(english, chinese):
    en_text = (ROOT / english).read_text(encoding="utf-8")
    zh_text = (ROOT / chinese).read_text(encoding="utf-8")
    found = differences(english, en_text, chinese, zh_text)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("english", "chinese"), PAIRS + TABLE_PAIRS, ids=[zh for _, zh in PAIRS + TABLE_PAIRS]
)
def test_the_chinese_page_links_the_chinese_pages(english, chinese):
    """Where a linked page has a Chinese translation, the Chinese page links the translation."""
    text = (ROOT / chinese).read_text(encoding="utf-8")
    translated = {en: zh for en, zh in PAIRS + TABLE_PAIRS}
    base = (ROOT / chinese).parent
    for match in re.finditer(r"\]\((?P<target>[^)#\s]+)(?:#[^)\s]*)?\)", text):
        target = match.group("target")
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # a URL
        path = (base / target).resolve()
        if not path.is_relative_to(ROOT):
            continue
        relative = path.relative_to(ROOT).as_posix()
        assert relative not in translated or relative == english, (
            f"{chinese}: links {target}; link its translation {translated[relative]} instead"
        )


def test_a_chinese_page_that_drifts_fails():
    """Each kind of difference is caught and named on the right side."""
    english = (
        "# Title\n\nTrain 1,200 steps on 2 cores (97.8%), see T3.\n\n## Run\n\n"
        "Use `attnlab train` with `--max-steps`.\n\n"
        "```bash\nattnlab train --max-steps 1200  # a comment\n```\n\n"
        "### Detail\n\n[guide](guide.md#step-2)\n"
    )
    chinese = (
        "# 标题\n\n在 2 个核心上训练 1200 步（97.8%），见 T3。\n\n## 运行\n\n"
        "用 `attnlab train` 和 `--max-steps`。\n\n"
        "```bash\n# 一行注释\nattnlab train --max-steps 1200  # 注释\n```\n\n"
        "### 细节\n\n[指南](guide.zh.md#步骤)\n"
    )
    assert differences("en.md", english, "zh.md", chinese) == []

    drifted = chinese.replace("1200 步", "1500 步")
    assert differences("en.md", english, "zh.md", drifted) == [
        "en.md / zh.md: the number 1200 is missing in zh.md (1x)",
        "en.md / zh.md: the number 1500 is missing in en.md (1x)",
    ]
    drifted = chinese.replace("### 细节", "## 细节")
    [message] = differences("en.md", english, "zh.md", drifted)
    assert "heading 3 is level 3 in en.md" in message and "level 2 in zh.md" in message
    drifted = chinese.replace("--max-steps 1200  # 注释", "--max-steps 120  # 注释")
    [message] = differences("en.md", english, "zh.md", drifted)
    assert "code block en.md:9 / zh.md:9 differs" in message and "--max-steps 120'" in message
    drifted = chinese.replace("和 `--max-steps`", "")
    [message] = differences("en.md", english, "zh.md", drifted)
    assert message == "en.md / zh.md: the inline code `--max-steps` is missing in zh.md"
    drifted = chinese.replace("### 细节\n\n", "")
    assert any(
        "3 headings in en.md, 2 in zh.md" in m
        for m in differences("en.md", english, "zh.md", drifted)
    )


def test_comments_are_stripped_but_not_quoted_hashes():
    assert strip_comments("bash", "echo '#not' \"a # b\" x#y  # comment\n# line\n") == (
        "echo '#not' \"a # b\" x#y"
    )
    assert strip_comments("python", 'x = "#1"  # one\n# alone\ny = 2\n') == 'x = "#1"\ny = 2'
    assert strip_comments("toml", 'name = "files"   # numbers | files\n') == 'name = "files"'


def test_what_counts_as_a_number():
    page = read(
        "Steps: 1,014 and 4,600; 38.63 BLEU; 97.8%; torch 2.13.0; T3-T12; 8x8; 1e-5; 0,1.\n"
        "<!-- file: data/7.txt -->\n[a](docs/x2.md#step-9) ![b](img/3.png)\n"
        "```text\n42\n```\n"
    )
    assert page.numbers == Counter(
        ["1014", "4600", "38.63", "97.8", "2.13.0", "3", "12", "8", "8", "1", "5", "0", "1"]
    )
