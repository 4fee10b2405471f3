"""A claim's section of the report: its statement, checks, Markdown body and figures, in every
language of the report.

The numbers, checks and figures are computed once; only the prose differs by language. Each
piece of prose is a :class:`Prose`: the English string itself (so checks, titles and the CLI read
as plain English) carrying its Chinese beside it, written next to the English where the claim is
run. Figures keep English labels (matplotlib may lack a CJK font).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..._checks import check_choice
from ..viz._figures import finish

#: The languages a report is written in: English and Chinese (the tutorial's language).
LANGS = ("en", "zh")


class Prose(str):
    """English text that carries its Chinese translation.

    ``Prose(en, zh)`` *is* the string ``en``; :func:`in_lang` picks ``zh`` for ``lang="zh"``.
    Both are formatted from the same measured values, so the two languages state the same
    numbers."""

    zh: str

    def __new__(cls, en: str, zh: str) -> Prose:
        text = super().__new__(cls, en)
        text.zh = zh
        return text


def check_lang(lang: object) -> str:
    return str(check_choice(lang, LANGS, "lang"))


def in_lang(text: str, lang: str) -> str:
    """``text`` in ``lang``: a :class:`Prose`'s Chinese for ``"zh"``, otherwise the text as is
    (numbers, tables and formulas are the same in every language)."""
    if lang == "zh" and isinstance(text, Prose):
        return text.zh
    return str(text)


#: The report's fixed words, per language.
LABELS = {
    "en": {
        "claim": "**Claim.**",
        "checks": "**Checks.**",
        "timed": "**Timed on this machine** (reported, not asserted):",
        "seen": "seen",
        "not seen": "not seen in this run",
    },
    "zh": {
        "claim": "**论断。**",
        "checks": "**检验。**",
        "timed": "**本机计时**（只报告，不作判定）：",
        "seen": "本次运行观察到",
        "not seen": "本次运行未观察到",
    },
}


@dataclass
class Section:
    """One claim: its checks (statement, passed), the Markdown body and the figure files.

    ``observations`` are wall-clock comparisons: reported with what this run saw, never a
    failure (times on a shared machine vary; counts and values are what the checks decide).
    Text fields hold English ``str`` or :class:`Prose` (English with its Chinese).
    """

    key: str
    title: str
    claim: str
    checks: list[tuple[str, bool]] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    observations: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok in self.checks)

    def check(self, statement: str, ok: bool) -> None:
        self.checks.append((statement, bool(ok)))

    def observe(self, statement: str, seen: bool) -> None:
        """Report a timing comparison and whether this run saw it, without deciding."""
        self.observations.append((statement, bool(seen)))

    def markdown(self, lang: str = "en") -> str:
        """The section in Markdown, its prose in ``lang`` (one of :data:`LANGS`)."""
        words = LABELS[check_lang(lang)]
        title, claim = in_lang(self.title, lang), in_lang(self.claim, lang)
        lines = [f"## {self.key}: {title}", "", f"{words['claim']} {claim}", ""]
        lines += [*(in_lang(line, lang) for line in self.body), ""]
        lines += [f"![{self.key}]({name})" for name in self.figures]
        if self.figures:
            lines.append("")
        lines.append(words["checks"])
        lines.append("")
        lines += [
            f"- {'PASS' if ok else 'FAIL'}: {in_lang(text, lang)}" for text, ok in self.checks
        ]
        if self.observations:
            lines += ["", words["timed"], ""]
            lines += [
                f"- {words['seen' if seen else 'not seen']}: {in_lang(text, lang)}"
                for text, seen in self.observations
            ]
        return "\n".join(lines) + "\n"


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    """A Markdown table; a header or cell that is :class:`Prose` makes its line Prose."""

    def line(cells: list[object]) -> str:
        en = "| " + " | ".join(str(c) for c in cells) + " |"
        if not any(isinstance(c, Prose) for c in cells):
            return en
        return Prose(
            en,
            "| "
            + " | ".join((in_lang(c, "zh") if isinstance(c, str) else str(c)) for c in cells)
            + " |",
        )

    return [line(list(header)), "|" + "---|" * len(header), *(line(row) for row in rows)]


def save(section: Section, fig, out: Path, name: str) -> None:
    """Write ``fig`` as ``out/name`` and list it among the section's figures."""
    finish(fig, out / name)
    section.figures.append(name)
