"""The shape of the package, checked from its source: layers that import only downward, no
import cycles, no module importing another's private name, a top level of a few packages,
nothing outside the tasks that branches on the kind of task, and a training loop that knows no
task. Every import counts: a function's, and a type-only one under ``if TYPE_CHECKING:`` (it is
a dependency all the same, and a circle through it is a circle). (Read with ``ast``; nothing is
imported but the objectives' registry.)"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "attnlab"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports(name: str, path: Path) -> list[tuple[str, str, int]]:
    """``(module, imported name or "", line)`` of every import of ``name``'s source: those
    inside functions and those under ``if TYPE_CHECKING:`` too."""
    return _imports_in(_tree(path), name, package=path.name == "__init__.py")


def _imports_in(tree: ast.Module, name: str, *, package: bool) -> list[tuple[str, str, int]]:
    """The imports of module ``name`` (a package's ``__init__`` when ``package``) in ``tree``,
    relative ones made absolute."""
    parent = name.split(".") if package else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parent[: len(parent) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found += [(module, alias.name, node.lineno) for alias in node.names]
    return found


def _targets(name: str, path: Path) -> list[tuple[str, int]]:
    """``(module, line)``: the package's modules that ``name`` imports (``from . import x``
    counts as module x, ``from .. import f`` as the package ``..``)."""
    modules = _modules()
    found = []
    for module, imported, line in _imports(name, path):
        if f"{module}.{imported}" in modules:
            found.append((f"{module}.{imported}", line))
        elif module in modules:
            found.append((module, line))
    return [(target, line) for target, line in found if target != name]


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    return {name: {t for t, _ in _targets(name, path)} for name, path in _modules().items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_reader_finds_imports_and_cycles():
    graph = _graph()
    assert "attnlab.models.config" in graph["attnlab.models.transformer"]
    assert "attnlab.train.loop" in graph["attnlab.train"]
    assert "attnlab.inference.modeldir" in graph["attnlab.tasks.translation"]  # in a function
    source = """
from typing import TYPE_CHECKING
from . import sibling
from .. import face_name
if TYPE_CHECKING:
    from ..models.transformer import Transformer
def f():
    import attnlab.nn.masks
"""
    found = _imports_in(ast.parse(source), "attnlab.decode.search", package=False)
    assert [(m, n) for m, n, _ in found if m.startswith("attnlab")] == [
        ("attnlab.decode", "sibling"),
        ("attnlab", "face_name"),
        ("attnlab.models.transformer", "Transformer"),  # type-only: counted
        ("attnlab.nn.masks", ""),  # inside a function: counted
    ]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """Every import counts, a function's and a type-only one too: a module that two others
    reach through each other cannot be read, tested or replaced alone."""
    assert _cycles(_graph()) == []


def test_no_module_imports_another_modules_private_name():
    modules = _modules()
    offences = [
        f"{path.relative_to(SRC)}:{line}: {imported} from {module}"
        for name, path in modules.items()
        for module, imported, line in _imports(name, path)
        if module.startswith("attnlab")
        and imported.startswith("_")
        and not imported.startswith("__")
        and f"{module}.{imported}" not in modules  # a private module (_checks) is fine
    ]
    assert offences == []


#: The layers, from the ground up (CONTRIBUTING.md, "The architecture in a page"), as
#: import-linter's layers contract: a module imports its own layer or a lower one, never a
#: higher one, type-only imports included. GROUND is every private top-level module
#: (``_checks.py``, ``_io.py``, ...), FACE the package's public face (``__init__.py``,
#: ``__main__.py``); the other names are packages. A new package goes where it belongs here.
GROUND, FACE = "<ground>", "<face>"
LAYERS: tuple[tuple[str, ...], ...] = (
    (GROUND,),
    ("nn", "data"),
    ("models",),
    ("decode", "train", "formats"),
    ("inference", "instruments"),
    ("tasks", "serve"),
    ("jobs",),
    ("cli", FACE),
)
#: The public face's modules at the top level; every other top-level module is private and on
#: the ground floor.
FACE_MODULES = {"__init__", "__main__"}


def _place(module: str) -> str:
    """The name ``module`` has in :data:`LAYERS`: its package, GROUND or FACE."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in FACE_MODULES):
        return FACE
    if len(parts) == 2 and (PACKAGE / f"{parts[1]}.py").is_file():
        return GROUND
    return parts[1]


def _layer(module: str) -> int:
    place = _place(module)
    return next(i for i, layer in enumerate(LAYERS) if place in layer)


def test_every_package_is_placed_in_the_layers():
    """A newcomer sees the architecture from the folder list: each package is named for what
    it holds and sits in one layer (a new package is welcome wherever LAYERS places it); the
    top level holds only the public face and the ground floor's private modules."""
    placed = [name for layer in LAYERS for name in layer]
    assert len(placed) == len(set(placed)), "a name placed in two layers"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(packages - set(placed)) == [], "packages missing from LAYERS"
    assert sorted(set(placed) - packages - {GROUND, FACE}) == [], "LAYERS names no package"
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert sorted(m for m in modules - FACE_MODULES if not m.startswith("_")) == [], (
        "a public module at the top level: put it in the package it belongs to"
    )
    assert {_place(f"attnlab.{m}") for m in modules} == {GROUND, FACE}


def test_the_layer_reader_places_modules():
    assert _place("attnlab") == _place("attnlab.__main__") == FACE
    assert _place("attnlab._checks") == _place("attnlab._rundir") == GROUND
    assert _place("attnlab.nn.attention") == _place("attnlab.nn") == "nn"
    assert _layer("attnlab._io") < _layer("attnlab.nn.masks") == _layer("attnlab.data.shards")
    assert _layer("attnlab.models") < _layer("attnlab.formats.bert") < _layer("attnlab.serve")
    assert _layer("attnlab.jobs.job") < _layer("attnlab.cli.train") == _layer("attnlab")


def test_the_layers_import_only_downward():
    """No arrow runs back up (CONTRIBUTING.md, "The architecture in a page"): a module
    imports its own layer or a lower one, never a higher one: not in a function, not for types
    only, not from the public face (``from attnlab import X`` inside the package)."""
    upward = [
        f"{path.relative_to(SRC)}:{line}: {name} ({_place(name)}, layer {_layer(name)}) imports "
        f"{target} ({_place(target)}, layer {_layer(target)})"
        for name, path in _modules().items()
        for target, line in _targets(name, path)
        if _layer(target) > _layer(name)
    ]
    assert upward == []


#: What branches on the kind of task: it belongs in the task's class (attnlab.tasks).
TASK_BRANCHES = (
    "is_lm", "is_image", "is_classifier", "task.name ==", "task.name !=", "task.name in",
    '"accuracy" in result', '"perplexity" in result', 'kind == "language_model"',
)  # fmt: skip


def test_nothing_outside_the_tasks_branches_on_the_kind_of_task():
    """The job layer, the trainer and the CLI look a task up and call it; they never ask
    which task it is."""
    found = [
        f"{path.relative_to(SRC)}: {word}"
        for path in PACKAGE.rglob("*.py")
        if "tasks" not in path.relative_to(PACKAGE).parts
        for word in TASK_BRANCHES
        if word in path.read_text(encoding="utf-8")
    ]
    assert found == []


TASK_FREE = ("loop", "step", "validation", "position", "checkpoint", "optim", "metrics", "rng")


@pytest.mark.parametrize("module", TASK_FREE)
def test_the_training_loop_knows_no_task(module):
    """The loop and its helpers import no model, no kind of data and no objective module (the
    tokenizers' file names are all they take from attnlab.data): what differs between tasks is
    behind the Objective protocol (attnlab.train.objectives)."""
    name = f"attnlab.train.{module}"
    path = _modules()[name]
    imported = {m for m, _, _ in _imports(name, path) if m.startswith("attnlab")}
    task_specific = (
        "attnlab.models.transformer",
        "attnlab.models.vision",
        "attnlab.data.batching",
        "attnlab.data.examples",
        "attnlab.data.mixture",
        "attnlab.data.images",
        "attnlab.train.objectives.",
    )
    assert [m for m in imported if m.startswith(task_specific)] == []
    source = path.read_text(encoding="utf-8")
    for word in ("is_lm", "is_classifier", "is_image", "VisionTransformer(", "TransformerLM("):
        assert word not in source, (module, word)


def test_every_built_in_objective_follows_the_protocol():
    from attnlab.models.transformer import Transformer, TransformerLM
    from attnlab.models.vision import VisionTransformer
    from attnlab.train import objectives

    members = [n for n in dir(objectives.Objective) if not n.startswith("_")]
    assert {"prepare", "batcher", "collate", "count", "loss", "evaluate_batch"} <= set(members)
    built_in = {
        Transformer: objectives.TranslationObjective,
        TransformerLM: objectives.LanguageModelObjective,
        VisionTransformer: objectives.ImageClassificationObjective,
    }
    for model_class, cls in built_in.items():
        assert cls.model_class is model_class
        missing = [n for n in members if not hasattr(cls, n)]
        assert missing == [], (cls.__name__, missing)
        assert cls.columns[:4] == ("step", "epoch", "loss", "lr") and cls.columns[5] == "val_loss"
