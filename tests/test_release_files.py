"""The release's files: CITATION.cff (Citation File Format) and CHANGELOG.md (Keep a Changelog,
with the version policy)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import attnlab

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_is_valid_cff_with_the_paper_as_a_reference():
    data = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    for key in ("cff-version", "message", "title", "authors"):  # CFF 1.2.0's required keys
        assert data.get(key), key
    assert re.fullmatch(r"1\.2\.\d+", str(data["cff-version"]))
    assert all(a.get("name") or a.get("family-names") for a in data["authors"])
    assert str(data["version"]) == attnlab.__version__  # one version, written in _version.py
    (paper,) = [r for r in data["references"] if r["title"] == "Attention Is All You Need"]
    assert paper["year"] == 2017 and paper["authors"][0]["family-names"] == "Vaswani"
    assert "NeurIPS" in paper["collection-title"]


def test_changelog_has_an_unreleased_section_and_the_version_policy():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^(#{2,3}) (.+)$", text, re.MULTILINE)
    titles = [title for _, title in headings]
    assert "[Unreleased]" in titles and "Version policy" in titles
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    for kind in ("### Added", "### Changed", "### Deprecated"):
        assert kind in unreleased, kind
    assert "semantic versioning" in text and "one minor" in text
