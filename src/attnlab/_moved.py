"""The Python spellings deprecated in 0.x, still working until :data:`REMOVED_IN` (the release
that removes them, as CHANGELOG.md's version policy and its "Deprecated" section say).

* The modules that moved into packages keep their old names: ``import attnlab.masks`` (or
  ``from attnlab.generate import beam_search``) finds the module at its new place,
  ``attnlab.nn.masks``, and warns with a :class:`DeprecationWarning` that names it.
* :func:`warn_deprecated` is the one warning every other deprecated Python spelling gives (a
  keyword argument, an attribute), naming its replacement and :data:`REMOVED_IN`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: The release that removes the spellings deprecated in this one: the module names below, the
#: deprecated Python spellings (:func:`warn_deprecated`) and the CLI's deprecated flags and
#: positionals (CHANGELOG.md, "Deprecated"). 0.1.0 is out; what it deprecates keeps working in
#: the next minor release, 0.2.0, and goes in the one after it.
REMOVED_IN = "0.3.0"

#: Old dotted name -> new dotted name (a package maps its submodules too).
MOVED: dict[str, str] = {
    "attnlab.masks": "attnlab.nn.masks",
    "attnlab.attention": "attnlab.nn.attention",
    "attnlab.positional": "attnlab.nn.positional",
    "attnlab.feedforward": "attnlab.nn.layers",
    "attnlab.layers": "attnlab.nn.layers",
    "attnlab.embeddings": "attnlab.models.embeddings",
    "attnlab.cache": "attnlab.nn.cache",
    "attnlab.config": "attnlab.models.config",
    "attnlab.model": "attnlab.models.transformer",
    "attnlab.vision": "attnlab.models.vision",
    "attnlab.pretrained": "attnlab.models.saved",
    "attnlab.generate": "attnlab.decode.search",
    "attnlab.decoding": "attnlab.decode.session",
    "attnlab.fastdecode": "attnlab.decode.fast",
    "attnlab.constraints": "attnlab.decode.constraints",
    "attnlab.translator": "attnlab.inference.translator",
    "attnlab.modeldir": "attnlab.inference.modeldir",
    "attnlab.evaluate": "attnlab.inference.scores",
    "attnlab.bounds": "attnlab.inference.bounds",
    "attnlab.export.marian_names": "attnlab.formats.marian",
    "attnlab.export.marian": "attnlab.formats.marian",
    "attnlab.export.ct2": "attnlab.formats.ctranslate2",
    "attnlab.export": "attnlab.formats",
    "attnlab.interop": "attnlab.formats.bert",
    "attnlab.torch_interop": "attnlab.nn.torch_nn",
    "attnlab.losses": "attnlab.train.losses",
    "attnlab.schedule": "attnlab.train.schedule",
    "attnlab.flops": "attnlab.instruments.flops",
    "attnlab.viz": "attnlab.instruments.viz",
    "attnlab.explain": "attnlab.instruments.explain",
    "attnlab.jobs.tables": "attnlab.jobs.job",
    # Moved in 0.x to keep the layers (CONTRIBUTING, "The architecture in a page"): the torch.nn
    # interop beside the blocks it copies, the embeddings beside the models that own them.
    "attnlab.nn.embeddings": "attnlab.models.embeddings",
    "attnlab.formats.torch_nn": "attnlab.nn.torch_nn",
}


_LONGEST_FIRST = sorted(MOVED, key=len, reverse=True)


def new_name(old: str) -> str | None:
    """Where module ``old`` lives now (None: it did not move)."""
    for prefix in _LONGEST_FIRST:
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix) :]
    return None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old name with the module at its new place (the same module object)."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if not fullname.startswith("attnlab."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        package = found is not None and found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old name goes in {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set the old name's spec: undo it


def warn_deprecated(old: str, new: str, *, outside: str) -> None:
    """Warn (:class:`DeprecationWarning`) that the Python spelling ``old`` is deprecated, naming
    ``new`` and :data:`REMOVED_IN`. The warning points at the first caller outside the file
    ``outside`` (the warning module's ``__file__``): the user's line, however many of that
    module's functions lie between, so Python's default filters show it to a script (once per
    line) and a test can catch it there."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: warn_deprecated's caller
    while frame.f_back is not None and frame.f_code.co_filename == outside:
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"{old} is deprecated; use {new} (the old spelling goes in {REMOVED_IN})",
        DeprecationWarning,
        stacklevel=level,
    )


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), before a stale directory of an old
    name could be taken for a namespace package."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
