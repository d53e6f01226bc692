"""Fail when the modules of src/pgbaton import each other in a circle, or when the data
plane's layers are imported upwards.

A circle makes the import order matter and the layers impossible to see: the core must
never need the worker, the CLI or the demo that are built on it. grimp builds the graph
of imports inside the package, counting imports inside functions (they still run,
only later) but not those under `if TYPE_CHECKING:` (they never run). A circle is a
strongly connected group of modules; each is reported with one import path around it.

The data plane is a face over an engine over the pool they share
(docs/explanation/architecture.md): `LAYERS` lists them from the top, and a module of a
layer may reach (through any chain of imports) only the layers below it; each import
path upwards is reported. A package in `LAYERS` stands for itself and every module
inside it.

Usage: python tools/check_imports.py [PACKAGE]   (exit 1 when a circle is found)
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable

import grimp

# Known circles, each broken at one named edge (importer, imported) until it is removed.
# Empty: the package has no import circle. An entry here needs a reason beside it.
ALLOWED_EDGES: frozenset[tuple[str, str]] = frozenset()

# The data plane's layers of pgbaton, from the top: the face users call (the queue, and
# the parts in _queue/ it is made of), the engine the worker and the leader call, the
# pool and statements both run on, and what builds their parameters and reads their
# rows without I/O.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pgbaton.queue_async", "pgbaton.queue", "pgbaton._queue"),
    ("pgbaton.engine_async", "pgbaton.engine"),
    ("pgbaton._database_async", "pgbaton._database"),
    ("pgbaton._engine_base", "pgbaton._queue_base"),
)


def strongly_connected(
    modules: Iterable[str], imports_of: dict[str, set[str]]
) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that reach each other."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(imports_of[root]))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = lowlink[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(imports_of[child])))
                elif child in on_stack:
                    lowlink[node] = min(lowlink[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in imports_of[node]:
                    groups.append(sorted(group))
    return groups


def describe(graph: grimp.ImportGraph, group: list[str]) -> str:
    """One circle through the group's first module, with the line of each import."""
    start = group[0]
    back = [m for m in group if graph.direct_import_exists(importer=m, imported=start)]
    chain = [start] if start in back else None
    for last in back:
        path = graph.find_shortest_chain(importer=start, imported=last)
        if path is not None and (chain is None or len(path) < len(chain)):
            chain = list(path)
    assert chain is not None
    ring = [*chain, start]
    steps = []
    for importer, imported in itertools.pairwise(ring):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = f" (line {details[0]['line_number']})" if details else ""
        steps.append(f"  {importer} imports {imported}{where}")
    return "\n".join(steps)


def layer_modules(graph: grimp.ImportGraph, layer: tuple[str, ...]) -> list[str]:
    """The modules of a layer: each named, and those inside a package named."""
    modules = []
    for name in layer:
        modules.append(name)
        if name in graph.modules:
            modules.extend(sorted(graph.find_descendants(name)))
    return modules


def upward_imports(graph: grimp.ImportGraph, package: str) -> list[str]:
    """Each import path by which a layer of LAYERS reaches one above it."""
    found = []
    layers = [layer_modules(graph, layer) for layer in LAYERS]
    for depth, lower in enumerate(layers):
        for upper in layers[:depth]:
            for importer in lower:
                for imported in upper:
                    if importer.split(".")[0] != package or importer not in graph.modules:
                        continue
                    chain = graph.find_shortest_chain(importer=importer, imported=imported)
                    if chain is not None:
                        found.append(" -> ".join(chain))
    return found


def main(package: str = "pgbaton") -> int:
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    for importer, imported in ALLOWED_EDGES:
        if importer.split(".")[0] != package:
            continue
        if not graph.direct_import_exists(importer=importer, imported=imported):
            print(f"check_imports: the allowed import {importer} -> {imported} is gone: "
                  "remove it from ALLOWED_EDGES", file=sys.stderr)
            return 1
        graph.remove_import(importer=importer, imported=imported)
    imports_of = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    circles = strongly_connected(graph.modules, imports_of)
    for group in circles:
        print(f"check_imports: an import circle among {', '.join(group)}:", file=sys.stderr)
        print(describe(graph, group), file=sys.stderr)
    upward = upward_imports(graph, package)
    for chain in upward:
        print(f"check_imports: a lower layer imports a higher one (LAYERS): {chain}",
              file=sys.stderr)
    return 1 if circles or upward else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
