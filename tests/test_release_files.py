"""The release's files: CITATION.cff (Citation File Format), CHANGELOG.md (Keep a Changelog,
with the version policy), and no tracked file naming a directory outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
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


#: Ways a file can name the directory beside the repository that one machine keeps data in (CI's
#: copy of Multi30K): written in pieces, so that this file does not name it either.
OUTSIDE = (".." + "/" + "shared", "shared" + "/" + "data" + "/")


def test_no_tracked_file_names_a_directory_outside_the_repository():
    """A fresh clone works anywhere: data is found where attnlab looks ($ATTNLAB_MULTI30K, else
    its download cache), never at a path beside the repository. Only the CI entry point
    (.ci/) may point ATTNLAB_MULTI30K at the CI machine's copy."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or a copy): no list of tracked files")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode("utf-8", "surrogateescape")
    found = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if name.startswith(".ci/") or not path.is_file():  # .ci/: CI's own machine; gone: moved
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: weights, pictures, archives
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            found += [f"{name}:{number}: {line.strip()}" for piece in OUTSIDE if piece in line]
    assert not found, "a path outside the repository:\n" + "\n".join(found)
