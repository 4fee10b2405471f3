"""The old module names of :mod:`attnlab._moved`: each still imports, as the module at its new
place, with a DeprecationWarning that names the new place."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

import attnlab  # noqa: F401  (installs the finder)
from attnlab._moved import MOVED, new_name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_new_place_exists(old):
    assert importlib.util.find_spec(MOVED[old]) is not None, (old, MOVED[old])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("attnlab.formats.torch_nn", "attnlab.nn.torch_nn"),
        ("attnlab.torch_interop", "attnlab.nn.torch_nn"),
        ("attnlab.nn.embeddings", "attnlab.models.embeddings"),
        ("attnlab.embeddings", "attnlab.models.embeddings"),
    ],
)
def test_an_old_name_imports_the_new_module_with_a_warning(old, new, monkeypatch):
    assert new_name(old) == new
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new
