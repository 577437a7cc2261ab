"""The package's rooms, the direction of their imports, and the size of its modules
(ARCHITECTURE.md).

Every import inside ``marshal_py`` -- also the lazy ones inside functions and those under
``TYPE_CHECKING`` -- is read from the source. A room may import only from rooms on a lower
layer (or from itself), no group of modules may import one another in a circle, and no module
is longer than :data:`MAX_MODULE_LINES`. The exceptions that exist today are listed by name
below: the test fails on a new one, and also when a listed one is gone (so the lists only
shrink).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "marshal_py"

#: Layer of each room (a subpackage, or a module at the package's root): imports point to
#: lower numbers; rooms on one layer know nothing of each other (the log knows no rule of
#: the world, the world no I/O). Keep in step with ARCHITECTURE.md.
LAYERS = {
    "protocol": 0, "errors": 0, "identity": 0, "lazy": 0,         # wire format, errors: the leaves
    "world": 1,                                          # the pure core (no I/O, no clock)
    "log": 1,                                            # reading and writing __marshal
    "replay": 2,                                         # reading a log into the world
    "config": 2,                                         # Kafka properties, key files
    "client": 3,                                         # members, consumers, Marshaler
    "audit": 3,                                          # the whole-log audit (pure + local)
    "devbroker": 4,                                      # dev brokers, JVM processes
    "admin": 5,                                          # world views, audit, resets
    "spark": 6,                                          # Spark source, read_stream, audit
    "cli": 7,                                            # the command line, bin/demo
    "__init__": 8,                                       # the public facade
}

#: Imports against the layers that exist today (room -> room): to be moved away.
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: Circles of modules that exist today.
KNOWN_CYCLES: set[frozenset[str]] = set()


#: The longest a module may be, in lines (ARCHITECTURE.md: small modules, ~400 lines).
MAX_MODULE_LINES = 450

#: Modules longer than that today (path in the package -> what it holds): to be split.
KNOWN_LONG: dict[str, str] = {
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts) or "__init__"] = path
    return found


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The ``marshal_py`` modules ``module`` imports (names relative to the package)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package and package != "__init__" else []
                base_parts = base_parts[:len(base_parts) - node.level + 1]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            elif node.module and (node.module + ".").startswith("marshal_py."):
                base = node.module.removeprefix("marshal_py").lstrip(".")
            else:
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}" if base else alias.name
                yield candidate if candidate in modules else (base or "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.name + ".").startswith("marshal_py."):
                    yield alias.name.removeprefix("marshal_py").lstrip(".") or "__init__"


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {target for target in _imports(name, path, modules)
                   if target in modules and target != name}
            for name, path in modules.items()}


def _room(module: str) -> str:
    return module.split(".")[0]


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_every_room_has_a_layer() -> None:
    rooms = {_room(module) for module in _modules()}
    assert rooms <= set(LAYERS), f"rooms without a layer: {sorted(rooms - set(LAYERS))}"


def test_imports_point_down_except_the_known_ones() -> None:
    upward = {(_room(source), _room(target))
              for source, targets in _graph().items() for target in targets
              if _room(source) != _room(target)
              and LAYERS[_room(target)] >= LAYERS[_room(source)]}
    assert upward - KNOWN_UPWARD == set(), "imports against the layers (ARCHITECTURE.md)"
    assert KNOWN_UPWARD - upward == set(), "gone: remove them from KNOWN_UPWARD"


def test_no_new_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert cycles - KNOWN_CYCLES == set(), "modules importing one another in a circle"
    assert KNOWN_CYCLES - cycles == set(), "gone: remove them from KNOWN_CYCLES"


def test_the_walker_sees_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    source = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
              "from .b import x\nif TYPE_CHECKING:\n    from marshal_py.c import y\n"
              "def f():\n    import marshal_py.d\n")
    path = tmp_path / "a.py"
    path.write_text(source)
    modules = {"r.a": path, "r.b": path, "c": path, "d": path}
    assert set(_imports("r.a", path, modules)) == {"r.b", "c", "d"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {
        frozenset({"a", "b", "c"})}


def test_no_module_is_longer_than_the_limit_except_the_known_ones() -> None:
    long = {path.relative_to(PACKAGE).as_posix(): lines for path in PACKAGE.rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    new = {path: lines for path, lines in long.items() if path not in KNOWN_LONG}
    assert new == {}, (f"modules over {MAX_MODULE_LINES} lines: split them by role "
                       "(ARCHITECTURE.md)")
    gone = set(KNOWN_LONG) - set(long)
    assert gone == set(), "no longer over the limit: remove them from KNOWN_LONG"


#: The tools beside the package (the benchmarks, the fault campaigns) keep to the same limit.
TOOLS = ("bench", "chaos")
#: Tools' modules longer than that today (path from the checkout -> what it holds): to be split.
KNOWN_LONG_TOOLS: dict[str, str] = {
}


def test_no_tool_module_is_longer_than_the_limit_except_the_known_ones() -> None:
    root = PACKAGE.parent
    long = {path.relative_to(root).as_posix(): lines
            for tool in TOOLS for path in (root / tool).rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    new = {path: lines for path, lines in long.items() if path not in KNOWN_LONG_TOOLS}
    assert new == {}, f"modules over {MAX_MODULE_LINES} lines: split them by role"
    gone = set(KNOWN_LONG_TOOLS) - set(long)
    assert gone == set(), "no longer over the limit: remove them from KNOWN_LONG_TOOLS"


#: The longest a class may be, in lines (ARCHITECTURE.md: small classes, under ~400 lines).
MAX_CLASS_LINES = 400


def test_no_class_is_longer_than_the_limit() -> None:
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"] = lines
    assert long == {}, (f"classes over {MAX_CLASS_LINES} lines: split them by role "
                        "(ARCHITECTURE.md)")
