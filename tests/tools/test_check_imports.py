"""tools/check_imports.py, run on small packages written for each test."""

from __future__ import annotations

import importlib
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_imports.py"


def check(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Writes the package `circles` with the given modules and runs the tool on it."""
    package = tmp_path / "circles"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    return subprocess.run(
        [sys.executable, str(TOOL), "circles"], capture_output=True, text=True,
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, timeout=60, check=False,
    )


def test_an_import_inside_a_function_closes_a_circle(tmp_path):
    """a imports b at the top, b imports a inside a function: a circle, named with the
    line of each import, and exit 1."""
    done = check(tmp_path, {
        "a": "from . import b\n",
        "b": "def late():\n    from . import a\n    return a\n",
    })
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "check_imports: an import circle among circles.a, circles.b:",
        "  circles.a imports circles.b (line 1)",
        "  circles.b imports circles.a (line 2)",
    ]


def test_type_checking_imports_and_a_line_of_imports_pass(tmp_path):
    """Imports under `if TYPE_CHECKING:` never run, so they close no circle; a chain of
    imports without a way back passes."""
    done = check(tmp_path, {
        "a": "from . import b\n",
        "b": """\
            from typing import TYPE_CHECKING
            from . import c
            if TYPE_CHECKING:
                from . import a
            """,
        "c": "import json\n",
    })
    assert (done.returncode, done.stderr) == (0, "")



def test_the_data_planes_layers_name_modules_of_pgbaton_and_hold():
    """pgbaton's face, engine, pool and parameters import only downwards (the tool
    passes on the package as it is), and every module LAYERS names exists."""
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    tool = runpy.run_path(str(TOOL))
    for layer in tool["LAYERS"]:
        for module in layer:
            importlib.import_module(module)
