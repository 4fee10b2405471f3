"""attnlab._lazy: the public names of ``attnlab`` and ``attnlab.data`` load on first use, each
the very object its ``if TYPE_CHECKING:`` import names, and importing the packages (or the
command line) loads no torch."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import attnlab
import attnlab.data
from attnlab._lazy import _type_checking_imports

PACKAGES = [attnlab, attnlab.data]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_each_public_name_is_what_its_import_names(package) -> None:
    where = _type_checking_imports(package.__file__)
    assert set(package.__all__) - {"__version__"} == set(where)  # none missing, none extra
    for name, (module, attribute) in where.items():
        owner = importlib.import_module(module, package.__name__)
        expected = getattr(owner, attribute, None)
        if expected is None:  # a submodule (from .nn import masks)
            expected = importlib.import_module(f"{module}.{attribute}", package.__name__)
        assert getattr(package, name) is expected, name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_attribute_error(package) -> None:
    with pytest.raises(AttributeError, match=r"has no attribute 'Transformr'"):
        package.Transformr  # noqa: B018
    assert not hasattr(package, "Transformr")


def test_importing_the_packages_and_the_command_line_loads_no_torch() -> None:
    """A fresh interpreter: the packages and the CLI's module (what the ``attnlab`` script
    imports, and so what every spawned preparation worker imports again) leave torch
    unloaded; the first model name asked for loads it."""
    code = (
        "import json, sys\n"
        "import attnlab, attnlab.data, attnlab.cli, attnlab.data.workers\n"
        "before = 'torch' in sys.modules\n"
        "attnlab.Transformer\n"
        "print(json.dumps([before, 'torch' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True
    )
    assert json.loads(done.stdout) == [False, True]


def test_importing_meanwhile_imports_in_another_thread_and_waits_for_it(
    tmp_path, monkeypatch
) -> None:
    import threading

    from attnlab._lazy import importing_meanwhile

    (tmp_path / "slow_module_for_the_test.py").write_text(
        "import threading, time\ntime.sleep(0.2)\nTHREAD = threading.current_thread().name\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_module_for_the_test", raising=False)
    with importing_meanwhile("slow_module_for_the_test") as thread:
        assert thread.name != threading.current_thread().name
    assert not thread.is_alive()  # waited for on leaving the block
    module = sys.modules["slow_module_for_the_test"]
    assert thread.name == module.THREAD
    # A module that cannot be imported is left for the caller's own import to say so.
    with importing_meanwhile("no_such_module_for_the_test"):
        pass
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("no_such_module_for_the_test")
