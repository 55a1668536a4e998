"""The packages' imports go one way: no module imports, directly or not, one that imports it.

Every import counts, also one inside a function (a lazy import still ties the two modules
together) and one under ``TYPE_CHECKING``. ARCHITECTURE.md states the floors in its
```` ```floors ```` block, one ``name: entries`` line per floor, top floor first; the tests
here read that block and fail when the code disagrees with it: a module that imports one on
a higher floor, a module on no floor, an entry that names no module. An entry ``a.b.*`` is
the package ``a.b`` and every module under it; a bare ``a.b`` is that one module. A module
matched by several entries stands on the floor of the most specific one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("capture", "pipeline")
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
_FLOORS_BLOCK = re.compile(r"^```floors\n(.*?)^```", re.MULTILINE | re.DOTALL)


def module_files() -> dict[str, Path]:
    """Module name → file, for every module of :data:`PACKAGES`."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of the packages it imports (a name resolves to its longest module)."""

    def resolve(dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                return candidate
        return None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                found = resolve(target)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, edges_of_root in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges_of_root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    found = cycles(import_graph(module_files()))
    assert not found, "modules that import each other: " + "; ".join(map(" ↔ ".join, found))


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_cycles_finds_loops(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert sorted(cycles(graph)) == expected


def test_a_lazy_import_counts(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("def f():\n    from two import g\n")
    (tmp_path / "two.py").write_text("import one\n")
    graph = import_graph({"one": tmp_path / "one.py", "two": tmp_path / "two.py"})
    assert cycles(graph) == [["one", "two"]]


Floors = list[tuple[str, list[str]]]


def read_floors(text: str) -> Floors:
    """The ``floors`` block of ``text``: (floor name, entries), top floor first."""
    found = _FLOORS_BLOCK.search(text)
    assert found, "ARCHITECTURE.md has no ```floors block"
    floors: Floors = []
    for line in found.group(1).splitlines():
        if line.strip():
            name, sep, entries = line.partition(":")
            assert sep, f"floors line without 'name:': {line!r}"
            floors.append((name.strip(), entries.split()))
    return floors


def floor_of(module: str, floors: Floors) -> int | None:
    """The index of ``module``'s floor (0 = top), by its most specific entry; None: none."""
    best: tuple[int, int] | None = None  # (length of the entry, floor)
    for number, (_name, entries) in enumerate(floors):
        for entry in entries:
            package = entry.removesuffix(".*")
            matches = module == package or (
                entry.endswith(".*") and module.startswith(package + ".")
            )
            if matches and (best is None or len(package) > best[0]):
                best = (len(package), number)
    return None if best is None else best[1]


def disagreements(graph: dict[str, set[str]], floors: Floors) -> list[str]:
    """Where the code and the floors disagree, one line each (empty: they agree)."""
    problems: list[str] = []
    for number, (name, entries) in enumerate(floors):
        for entry in entries:
            package = entry.removesuffix(".*")
            if package not in graph:
                problems.append(f"floor {name!r} names {entry}, which is no module")
            elif floor_of(package, floors) != number:
                problems.append(f"{entry} stands on floor {name!r} and on another one too")
    problems.extend(
        f"{module} stands on no floor"
        for module in sorted(graph)
        if floor_of(module, floors) is None
    )
    for module, imported in sorted(graph.items()):
        here = floor_of(module, floors)
        for target in sorted(imported):
            there = floor_of(target, floors)
            if here is not None and there is not None and there < here:
                problems.append(
                    f"{module} (floor {floors[here][0]!r}) imports {target}, "
                    f"on the higher floor {floors[there][0]!r}"
                )
    return problems


def test_the_code_keeps_the_floors_of_architecture_md() -> None:
    floors = read_floors(ARCHITECTURE.read_text(encoding="utf-8"))
    problems = disagreements(import_graph(module_files()), floors)
    assert not problems, "ARCHITECTURE.md's floors and the code disagree:\n" + "\n".join(problems)


FLOORS_TEXT = """
intro
```floors
top:    app
middle: app.lib.* app.lib.special
ground: base
```
"""


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"app": {"app.lib"}, "app.lib": {"base"}, "app.lib.special": set(), "base": set()}, []),
        (
            {"app": set(), "app.lib": {"app"}, "app.lib.special": set(), "base": set()},
            ["app.lib (floor 'middle') imports app, on the higher floor 'top'"],
        ),
        (
            {"app": set(), "app.lib": set(), "app.lib.x": set(), "base": {"app.lib.x"}},
            [
                "floor 'middle' names app.lib.special, which is no module",
                "base (floor 'ground') imports app.lib.x, on the higher floor 'middle'",
            ],
        ),
        (
            {"app": set(), "app.lib": set(), "app.lib.special": set(), "base": set(), "new": set()},
            ["new stands on no floor"],
        ),
        (
            {"app": set(), "app.lib.special": set(), "base": set()},
            ["floor 'middle' names app.lib.*, which is no module"],
        ),
    ],
)
def test_disagreements_finds_every_kind(graph: dict[str, set[str]], expected: list[str]) -> None:
    assert disagreements(graph, read_floors(FLOORS_TEXT)) == expected


def test_a_module_under_a_bare_entry_stands_on_no_floor() -> None:
    floors = read_floors("```floors\ntop: app\n```\n")
    assert floor_of("app", floors) == 0
    assert floor_of("app.sub", floors) is None
