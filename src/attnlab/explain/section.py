"""A claim's section of the report: its statement, checks, Markdown body and figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..viz._figures import finish


@dataclass
class Section:
    """One claim: its checks (statement, passed), the Markdown body and the figure files.

    ``observations`` are wall-clock comparisons: reported with what this run saw, never a
    failure (times on a shared machine vary; counts and values are what the checks decide).
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

    def markdown(self) -> str:
        lines = [f"## {self.key}: {self.title}", "", f"**Claim.** {self.claim}", ""]
        lines += [*self.body, ""]
        lines += [f"![{self.key}]({name})" for name in self.figures]
        if self.figures:
            lines.append("")
        lines.append("**Checks.**")
        lines.append("")
        lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in self.checks]
        if self.observations:
            lines += ["", "**Timed on this machine** (reported, not asserted):", ""]
            lines += [
                f"- {'seen' if seen else 'not seen in this run'}: {text}"
                for text, seen in self.observations
            ]
        return "\n".join(lines) + "\n"


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def save(section: Section, fig, out: Path, name: str) -> None:
    """Write ``fig`` as ``out/name`` and list it among the section's figures."""
    finish(fig, out / name)
    section.figures.append(name)
