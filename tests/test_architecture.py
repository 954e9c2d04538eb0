"""Structure rules of the aot package, checked from the source (ast), so they stay true.

- No import cycles between modules of aot/. Every `import` and `from ... import` counts: at
  module level, inside functions (an import inside a function hides a cycle, it does not remove
  it) and under `if TYPE_CHECKING:` (an annotation-only import still makes the module depend on
  the other's design: `host.run` naming `Package` is half of the package <-> host cycle).
  `from pkg import name` reads the submodule pkg.name where there is one. The implicit import
  of a module's parent packages is left out, as import linters do.
- No function in aot/ longer than MAX_FUNCTION_LINES, from its `def` line to its last line
  (docstring included), unless it is listed below with the reason; none longer than
  MAX_NEW_FUNCTION_LINES in the modules of NEW_CODE.
- No function in aot/ takes more than MAX_POSITIONAL_PARAMETERS positional parameters (self and
  cls not counted): the others are keyword-only, or the operands that belong together one value.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "aot"
MAX_FUNCTION_LINES = 80
MAX_NEW_FUNCTION_LINES = 60
# New or moved code, held to MAX_NEW_FUNCTION_LINES: folders end in "/".
NEW_CODE = (
    "aot/targets/",
    "aot/commands/",
    "aot/ops/quantized/conv/",
    "aot/kernel/intrinsics.py",
    "aot/backends/llvm/intrinsics.py",
    "aot/ops/conv_forms.py",
    "aot/lowering/registry.py",
)
MAX_POSITIONAL_PARAMETERS = 8

# Functions allowed to be longer than MAX_FUNCTION_LINES in files owned by this branch, with
# the reason. Empty: none needs it.
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {}

# Long functions in files that another branch is splitting at the same time; each entry goes
# when that branch is merged (then the test holds it to the limit).
PENDING_OTHER_BRANCHES: dict[str, str] = {
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _import_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the module, at any depth."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from X import ...` reads, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _from_target(source: str, name: str, modules: Collection[str]) -> str:
    """`from source import name` reads the submodule source.name if there is one, else source.

    Running a submodule also runs its parent packages' __init__; like other import linters,
    the graph leaves that implicit edge out, or every package re-exporting its submodules
    would be a cycle.
    """
    submodule = f"{source}.{name}"
    return submodule if submodule in modules else source


def _imported_modules(module: str, source: str, is_package: bool, modules: Collection[str]) -> set[str]:
    """The aot modules that `module`, whose text is `source`, imports."""
    targets: set[str] = set()
    for node in _import_statements(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            origin = _resolve_from(module, is_package, node)
            names = [_from_target(origin, alias.name, modules) for alias in node.names]
        targets.update(name for name in names if name in modules)
    targets.discard(module)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: _imported_modules(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", modules)
        for name, path in modules.items()
    }

def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None; depth-first, in sorted order."""
    visiting: list[str] = []
    on_path: set[str] = set()
    done: set[str] = set()

    def visit(name: str) -> list[str] | None:
        visiting.append(name)
        on_path.add(name)
        for target in sorted(graph[name]):
            if target in on_path:
                return visiting[visiting.index(target) :] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        visiting.pop()
        on_path.discard(name)
        done.add(name)
        return None

    for name in sorted(graph):
        if name not in done:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


def test_find_cycle_reports_the_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b"}, "d": set()}
    assert find_cycle(graph) == ["b", "c", "b"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


_IMPORTS = """
from . import c
from ..d import thing
from aot.a import helper
import aot.e as e
from typing import TYPE_CHECKING
import numpy
if TYPE_CHECKING:
    from aot.f import Type
def later():
    from aot.g import function
"""


def test_imports_are_resolved_to_modules() -> None:
    modules = {"aot.a", "aot.a.b", "aot.a.c", "aot.d", "aot.e", "aot.f", "aot.g"}
    found = _imported_modules("aot.a.b", _IMPORTS, is_package=False, modules=modules)
    # `from . import c` reads the submodule aot.a.c; `from aot.a import helper` the package
    assert found == {"aot.a.c", "aot.d", "aot.a", "aot.e", "aot.f", "aot.g"}
    assert _imported_modules("aot.a", "from . import c", is_package=True, modules=modules) == {"aot.a.c"}


def test_import_graph_sees_imports_inside_functions() -> None:
    assert "aot.commands.compile" in import_graph()["aot.cli"]  # cli imports it in its commands only

def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _function_lengths(source: str) -> dict[str, int]:
    """Qualified name (Class.method, outer.inner) -> lines from `def` to its end."""
    lengths: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                assert child.end_lineno is not None
                lengths[name] = child.end_lineno - child.lineno + 1
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return lengths


_FUNCTIONS = '''
class Plan:
    @property
    def size(self):
        """A docstring counts."""
        return 1

def outer():
    def inner():
        pass
    return inner
'''


def test_function_lengths_count_from_def_to_end() -> None:
    assert _function_lengths(_FUNCTIONS) == {"Plan.size": 3, "outer": 4, "outer.inner": 2}


def _sources() -> dict[str, str]:
    """Path relative to the repository (aot/...) -> text, for every module of aot/."""
    return {path.relative_to(PACKAGE_DIR.parent).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _functions_over(limit: int, sources: dict[str, str]) -> dict[str, int]:
    """"path:qualified name" -> lines, of the functions of `sources` longer than `limit`."""
    return {f"{relative}:{name}": lines for relative, source in sources.items()
            for name, lines in _function_lengths(source).items() if lines > limit}


def long_functions() -> dict[str, int]:
    return _functions_over(MAX_FUNCTION_LINES, _sources())


def _is_new_code(relative: str) -> bool:
    return any(relative.startswith(place) if place.endswith("/") else relative == place for place in NEW_CODE)


def test_new_code_places_exist() -> None:
    # A place renamed or gone would leave its code unchecked.
    root = PACKAGE_DIR.parent
    missing = [place for place in NEW_CODE if not (root / place).exists()]
    assert not missing, f"NEW_CODE names places that do not exist: {missing}"


def test_new_code_functions_are_shorter() -> None:
    new_code = {relative: source for relative, source in _sources().items() if _is_new_code(relative)}
    long = _functions_over(MAX_NEW_FUNCTION_LINES, new_code)
    assert not long, f"functions over {MAX_NEW_FUNCTION_LINES} lines in new code (split them): {long}"

def test_functions_are_short() -> None:
    allowed = LONG_FUNCTION_EXCEPTIONS | PENDING_OTHER_BRANCHES
    new = {name: lines for name, lines in long_functions().items() if name not in allowed}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them): {new}"


def test_long_function_exceptions_are_still_needed() -> None:
    # An exception for a function that is gone or now short would let a new one in unseen.
    found = long_functions()
    stale = [name for name in LONG_FUNCTION_EXCEPTIONS | PENDING_OTHER_BRANCHES if name not in found]
    assert not stale, f"exceptions no longer needed, remove them: {stale}"


def _positional_parameters(source: str) -> dict[str, int]:
    """Qualified name -> the positional parameters of each function (positional-only ones
    included; a first parameter named self or cls not counted)."""
    counts: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [arg.arg for arg in child.args.posonlyargs + child.args.args]
                counts[prefix + child.name] = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return counts


_PARAMETERS = '''
class Emitter:
    def __init__(self, a, b, /, c, *, d):
        pass

    @classmethod
    def of(cls, a, *rest, **options):
        def inner(x, y=1):
            pass

def free(self, a):
    pass
'''


def test_positional_parameters_leave_out_self_and_keyword_only() -> None:
    assert _positional_parameters(_PARAMETERS) == {
        "Emitter.__init__": 3, "Emitter.of": 1, "Emitter.of.inner": 2, "free": 1}


def test_functions_take_few_positional_parameters() -> None:
    # No exemption for aot/cli.py's typer commands: typer passes every parameter by name, so
    # keyword-only ones work there too.
    many = {f"{relative}:{name}": count for relative, source in _sources().items()
            for name, count in _positional_parameters(source).items() if count > MAX_POSITIONAL_PARAMETERS}
    assert not many, (f"functions with more than {MAX_POSITIONAL_PARAMETERS} positional parameters (make the "
                      f"rest keyword-only, or bundle the operands that belong together): {many}")
