"""`attnlab explain --lang zh`: the report in Chinese, the tutorial's language, from the same
run as the English one: the same sections, numbers and verdicts, Chinese prose in every section.

One quick run through the real command (``python -m attnlab``) serves every test that reads
the reports; the rest are unit tests of the Prose machinery and cost nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from attnlab.cli import build_parser
from attnlab.instruments.explain import (
    LANGS,
    REPORT,
    REPORTS,
    Prose,
    Section,
    explain,
    in_lang,
    render,
)
from attnlab.instruments.explain.section import table

KEYS = ["T3", "T5, T6", "T7", "T10, T11", "T12", "Table 1"]
CJK = re.compile(r"[\u4e00-\u9fff]")
#: A number as the report writes it: 512, 60,129,542,144, 0.1705, 8.9e-08. Digits inside a
#: name (float64, T3, Conv1d) or after a decimal point already read (2.13.0) are not numbers.
NUMBER = re.compile(r"(?<![A-Za-z_\d.,])\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?")
VERDICT = re.compile(r"^- (?:PASS|FAIL): |\*\*(?:PASS|FAIL)\*\*$", re.M)


def _attnlab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnlab", *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )


#: These read one more quick run of every claim, through the CLI in both languages (about 6 s
#: on an idle machine; tests/instruments/test_explain.py runs the claims themselves in the fast
#: set).
SECOND_RUN = pytest.mark.slow


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("explain_zh")
    run = _attnlab("explain", "--out", str(out), "--quick", "--lang", "zh")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6/6 claims held" in run.stdout
    assert f"Report: {out / 'report.zh.md'} (English: {out / 'report.md'})" in run.stdout
    assert (
        "为什么注意力分数要除以 sqrt(d_k)" in run.stdout
    )  # progress lines name the claims in Chinese
    return {lang: (out / REPORTS[lang]).read_text(encoding="utf-8") for lang in LANGS}


def _sections(report: str) -> dict[str, str]:
    """The report split at its '## KEY: title' headings; '' holds what comes before."""
    parts = re.split(r"^## ", report, flags=re.M)
    sections = {"": parts[0]}
    for part in parts[1:]:
        key = next(k for k in KEYS if part.startswith(f"{k}: "))
        sections[key] = part
    return sections


@SECOND_RUN
def test_both_reports_have_the_same_sections_in_order(reports):
    en, zh = _sections(reports["en"]), _sections(reports["zh"])
    assert list(en) == list(zh) == ["", *KEYS]


@SECOND_RUN
def test_the_same_numbers_in_every_section(reports):
    """Prose is rewritten, never a number: each section states the same numbers in both."""
    en, zh = _sections(reports["en"]), _sections(reports["zh"])
    for key in en:
        numbers_en, numbers_zh = Counter(NUMBER.findall(en[key])), Counter(NUMBER.findall(zh[key]))
        assert numbers_en, key
        assert numbers_en == numbers_zh, (key, numbers_en - numbers_zh, numbers_zh - numbers_en)
    assert "60,129,542,144" in reports["zh"] and "68,719,476,736" in reports["zh"]


@SECOND_RUN
def test_the_same_verdicts_in_the_same_order(reports):
    en, zh = _sections(reports["en"]), _sections(reports["zh"])
    for key in en:
        assert VERDICT.findall(en[key]) == VERDICT.findall(zh[key]), key
    assert len(VERDICT.findall(reports["zh"])) == len(VERDICT.findall(reports["en"])) > 6
    # Timed observations are reported in both, with what this run saw.
    seen_en = re.findall(r"^- (seen|not seen in this run): ", reports["en"], flags=re.M)
    seen_zh = re.findall(r"^- (本次运行观察到|本次运行未观察到): ", reports["zh"], flags=re.M)
    assert seen_en and [s == "seen" for s in seen_en] == [s == "本次运行观察到" for s in seen_zh]


@SECOND_RUN
def test_the_same_figures(reports):
    figures = [re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", reports[lang], flags=re.M) for lang in LANGS]
    assert figures[0] == figures[1] and len(figures[0]) == 7


@SECOND_RUN
def test_every_line_of_prose_is_chinese(reports):
    """Every section has Chinese, and no English sentence was left untranslated: each prose
    line, check and table header carries CJK text (tables' numbers stay as they are)."""
    zh = _sections(reports["zh"])
    for key, text in zh.items():
        assert CJK.search(text), key
        lines = text.splitlines()
        for line, following in zip(lines, [*lines[1:], ""], strict=True):
            header = line.startswith("|") and following.startswith("|---")
            if header or (line and not line.startswith(("|", "!["))):
                assert CJK.search(line), (key, line)
    assert "坐标轴标签和标题是英文的" in reports["zh"]  # figures keep English labels; said so
    assert "[report.md](report.md)" in reports["zh"]


@SECOND_RUN
def test_the_english_report_has_no_chinese(reports):
    assert not CJK.search(reports["en"])


@pytest.mark.slow  # not in make test-fast: a subprocess, or waits on deadlines by design
def test_lang_fr_is_refused_by_the_command_in_one_line(tmp_path):
    run = _attnlab("explain", "--out", str(tmp_path / "out"), "--lang", "fr")
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert errors[0].startswith("attnlab explain: error: argument --lang: invalid choice: 'fr'")
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_the_command_offers_every_language_and_defaults_to_english():
    parser = build_parser()
    explain_parser = parser._subparsers._group_actions[0].choices["explain"]
    lang = next(a for a in explain_parser._actions if a.dest == "lang")
    assert tuple(lang.choices) == LANGS and lang.default == "en"


def test_the_library_refuses_an_unknown_language_before_running(tmp_path):
    with pytest.raises(ValueError, match=r"^lang: expected one of en, zh, got 'fr'$"):
        explain(tmp_path / "out", quick=True, lang="fr")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"^lang: "):
        render([], "de")


# -- the Prose machinery, without running the claims ---------------------------------------------


def test_prose_is_its_english_and_carries_its_chinese():
    text = Prose("weights are 0", "权重为 0")
    assert text == "weights are 0" and isinstance(text, str)
    assert in_lang(text, "en") == "weights are 0" and in_lang(text, "zh") == "权重为 0"
    assert in_lang("plain", "zh") == "plain"  # numbers, formulas: the same in every language


def test_a_section_renders_in_each_language():
    section = Section("X", Prose("title", "标题"), Prose("claim", "论断内容"))
    section.body += [Prose("body 1", "正文 1"), *table([Prose("n", "个数"), "d"], [[1, 2]])]
    section.check(Prose("holds (3)", "成立（3）"), True)
    section.observe(Prose("faster", "更快"), False)
    en, zh = section.markdown("en"), section.markdown("zh")
    assert en == section.markdown() and "## X: title" in en and "- PASS: holds (3)" in en
    assert "| n | d |" in en and "| 1 | 2 |" in en and "- not seen in this run: faster" in en
    assert "## X: 标题" in zh and "**论断。** 论断内容" in zh and "正文 1" in zh
    assert "| 个数 | d |" in zh and "| 1 | 2 |" in zh
    assert "- PASS: 成立（3）" in zh and "- 本次运行未观察到: 更快" in zh
    with pytest.raises(ValueError, match=r"^lang: expected one of en, zh, got 'fr'$"):
        section.markdown("fr")


def test_render_summarises_in_each_language():
    held, failed = Section("A", Prose("a", "甲"), "c"), Section("B", Prose("b", "乙"), "c")
    held.check("ok", True)
    failed.check("no", False)
    zh = render([held, failed], "zh", quick=True, seed=3)
    assert "2 条论断：1 条成立，1 条不成立（快速运行）；seed 3" in zh
    assert "- A: 甲: **PASS**" in zh and "- B: 乙: **FAIL**" in zh
    en = render([held, failed], "en", seed=3)
    assert "2 claims" in en and "1 held, 1 failed; seed 3" in en and REPORT == "report.md"
