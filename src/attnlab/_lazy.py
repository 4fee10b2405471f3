"""A package's public names, loaded on first use (PEP 562).

``import attnlab`` and ``import attnlab.data`` then cost what the caller uses: a preparation
worker that imports :mod:`attnlab.data.workers` loads neither torch nor the models (about
150 MB a process), while ``from attnlab import Transformer`` reads as it always has.

A package states its names once, as ordinary imports under ``if TYPE_CHECKING:`` (what type
checkers and editors read), and calls :func:`lazy_exports`, which reads those imports from the
package's source and makes each one when its name is first asked for; it is then a plain
attribute of the package.

:func:`importing_meanwhile` overlaps a slow import with the caller's own work.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["importing_meanwhile", "lazy_exports"]

_MISSING = object()


def lazy_exports(namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is
    ``namespace``: its names are those its source imports under ``if TYPE_CHECKING:``
    (``from .nn.masks import causal_mask``, ``from .decode import search as generate``)."""
    package = namespace["__name__"]
    where = _type_checking_imports(Path(namespace["__file__"]))

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = where[name]
        module = importlib.import_module(module_name, package)
        value = getattr(module, attribute, _MISSING)
        if value is _MISSING:  # a submodule its package does not import itself
            value = importlib.import_module(f"{module_name}.{attribute}", package)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def _type_checking_imports(source: str | Path) -> dict[str, tuple[str, str]]:
    """``{name: (module, attribute)}`` of the ``from MODULE import ATTRIBUTE as NAME``
    statements under the module's top-level ``if TYPE_CHECKING:``."""
    where: dict[str, tuple[str, str]] = {}
    for node in ast.parse(Path(source).read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise TypeError(f"{source}: only `from ... import ...` under TYPE_CHECKING")
            module = "." * statement.level + (statement.module or "")
            for alias in statement.names:
                where[alias.asname or alias.name] = (module, alias.name)
    return where


@contextlib.contextmanager
def importing_meanwhile(name: str) -> Iterator[threading.Thread]:
    """Import module ``name`` in a thread while the ``with`` block runs; on leaving it, wait
    for the import to end. The import's Python work then overlaps the block's reading and
    numpy, which let the GIL go (``attnlab train``: torch's optimizers import
    ``torch._dynamo`` on their first call, a second of the start). A failed import is left for
    the caller's own import to raise."""

    def load() -> None:
        with contextlib.suppress(Exception):
            importlib.import_module(name)

    thread = threading.Thread(target=load, name=f"import {name}", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join()
