"""The layers of aot/ import downwards only: the command tools sit on the driver, the ops on the
lowering framework, and the target records, IR and kernel IR on nothing above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AOT = Path(__file__).resolve().parent.parent / "aot"

# package -> the aot packages and modules it must not import, even inside functions
FORBIDDEN = {
    "ir": ("aot.ops", "aot.lowering", "aot.kernel", "aot.backends", "aot.commands", "aot.cli", "aot.planner"),
    "kernel": ("aot.ops", "aot.lowering", "aot.backends", "aot.commands", "aot.cli", "aot.planner"),
    "targets": ("aot.ops", "aot.lowering", "aot.kernel", "aot.backends", "aot.commands", "aot.cli", "aot.planner"),
    "lowering": ("aot.ops", "aot.backends", "aot.commands", "aot.cli", "aot.planner"),
    "ops": ("aot.backends", "aot.commands", "aot.cli", "aot.planner"),
    "planner": ("aot.commands", "aot.cli"),
    "backends": ("aot.commands", "aot.cli"),
}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(package: str) -> None:
    found = []
    for path in sorted((AOT / package).rglob("*.py")):
        for module in imported_modules(path):
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[package]):
                found.append(f"{path.relative_to(AOT.parent)} imports {module}")
    assert not found, "\n".join(found)
