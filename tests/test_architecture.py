"""The shape of the package, checked from its source: no import cycles, no module importing
another's private name, a top level of a few packages, nothing outside the tasks that
branches on the kind of task, and a training loop that knows no task. (Read with ``ast``;
nothing is imported but the objectives' registry.)"""

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
    """``(module, imported name or "", line)`` of every import of ``name``'s source, those
    inside functions too, but not those under ``if TYPE_CHECKING:`` (never run)."""
    tree = _tree(path)
    typing_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for node in ast.walk(branch)
    }
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found += [(module, alias.name, node.lineno) for alias in node.names]
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from . import x`` counts as module x)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, imported, _ in _imports(name, path):
            if f"{module}.{imported}" in modules:
                targets.add(f"{module}.{imported}")
            elif module in modules:
                targets.add(module)
        graph[name] = targets - {name}
    return graph


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
    assert (
        "attnlab.formats.bert" in graph["attnlab.models.transformer"]
    )  # from_bert's import, inside a method
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """Every import counts, a function's too: a module that two others reach through each
    other cannot be read, tested or replaced alone."""
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


#: The package's top level: the public face and the ground floor, then the packages.
TOP_MODULES = {
    "__init__", "__main__", "_checks", "_io", "_moved", "_ops", "_tensorfile", "_version",
}  # fmt: skip
PACKAGES = {
    "cli", "data", "decode", "formats", "inference", "instruments", "jobs", "models", "nn",
    "serve", "tasks", "train",
}  # fmt: skip


def test_the_top_level_is_a_handful_of_packages():
    """A newcomer sees the architecture from the folder list: each package is named for what
    it holds (CONTRIBUTING.md, "The architecture in a page"), no concept sits loose."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert modules == TOP_MODULES
    assert packages == PACKAGES


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
        "attnlab.data.images",
        "attnlab.train.objectives.",
    )
    assert [m for m in imported if m.startswith(task_specific)] == []
    source = path.read_text(encoding="utf-8")
    for word in ("is_lm", "is_classifier", "is_image", "VisionTransformer(", "TransformerLM("):
        assert word not in source, (module, word)


def test_every_registered_objective_follows_the_protocol():
    from attnlab.models.transformer import Transformer, TransformerLM
    from attnlab.models.vision import VisionTransformer
    from attnlab.train.objectives import Objective, objective_class

    members = [n for n in dir(Objective) if not n.startswith("_")]
    assert {"prepare", "batcher", "collate", "count", "loss", "evaluate_batch"} <= set(members)
    for model_class in (Transformer, TransformerLM, VisionTransformer):
        cls = objective_class(model_class.__new__(model_class))
        assert cls.model_class is model_class
        missing = [n for n in members if not hasattr(cls, n)]
        assert missing == [], (cls.__name__, missing)
        assert cls.columns[:4] == ("step", "epoch", "loss", "lr") and cls.columns[5] == "val_loss"
