"""No import cycles in `app` or `agentrm_bench`.

A cycle makes the outcome of an import depend on which module a process happens to import
first: one order works, the other meets a half-initialised module. The graph counts every
import statement, those inside functions too, since a function-level import only moves the
failure to the first call.

Two checks:
- no strongly connected group of more than one module;
- no package whose `__init__` imports a module of its own that imports the package back, or
  leads, through its imports, to a module outside the package that imports back into it
  (importing that outside module first re-enters the half-run `__init__`, a cycle the graph
  shows only through the implicit import of a parent package).
"""
from __future__ import annotations

import grimp
import pytest

PACKAGES = ("app", "agentrm_bench", "agentrm_client")

@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def imports_of(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; each group sorted, groups in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(sorted(group))
    return sorted(groups)


def shortest_path(edges: dict[str, set[str]], start: str, goal: str, within: set[str]) -> list[str] | None:
    """The shortest chain start -> ... -> goal through modules of `within` (breadth first)."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges[node]):
                if nxt not in within or nxt in came_from:
                    continue
                came_from[nxt] = node
                if nxt == goal:
                    path = [goal]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                following.append(nxt)
        frontier = following
    return None


def describe(graph: grimp.ImportGraph, chain: list[str]) -> str:
    """One line per import of the chain: where it is and what it says."""
    lines = [chain[0]]
    for importer, imported in zip(chain, chain[1:]):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = "; ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details) or "an import"
        lines.append(f"  -> {imported}    ({importer} {where})")
    return "\n".join(lines)


def cycles(graph: grimp.ImportGraph) -> list[str]:
    edges = imports_of(graph)
    found = []
    for group in strongly_connected(edges):
        if len(group) < 2:
            continue
        members = set(group)
        first = group[0]
        closing = min((shortest_path(edges, nxt, first, members) for nxt in sorted(edges[first] & members)),
                      key=len)
        inner = [f"  {importer} -> {imported}" for importer in group for imported in sorted(edges[importer] & members)]
        found.append(f"{len(group)} modules import each other: {', '.join(group)}\n"
                     + describe(graph, [first, *closing])
                     + "\nevery import inside the group:\n" + "\n".join(inner))
    return found


def package_reentries(graph: grimp.ImportGraph) -> list[str]:
    edges = imports_of(graph)
    found = []
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        inside = {package} | graph.find_descendants(package)
        reached = graph.find_upstream_modules(package)
        for child in sorted(m for m in reached & inside if package in edges[m]):
            reach = shortest_path(edges, package, child, set(graph.modules))
            found.append(f"the package {package} imports {child}, which imports the package back\n"
                         + describe(graph, [*reach, package]))
        for outside in sorted(reached - inside):
            back = sorted(edges[outside] & inside)
            if not back:
                continue
            reach = shortest_path(edges, package, outside, set(graph.modules))
            found.append(f"the package {package} leads out to {outside}, which imports back into it\n"
                         + describe(graph, [*reach, back[0]]))
    return found


def test_the_graph_holds_both_packages(graph):
    assert {"app.cli", "app.domain.events", "agentrm_bench.cli", "agentrm_bench.policies"} <= graph.modules


def test_no_module_takes_part_in_an_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n\n" + "\n\n".join(found)


def test_no_package_init_is_reentered_during_its_own_import(graph):
    found = package_reentries(graph)
    assert not found, "packages re-entered during their own import:\n\n" + "\n\n".join(found)


def test_the_checks_see_a_cycle_and_a_reentered_package():
    g = grimp.ImportGraph()
    for module in ("pkg", "pkg.child", "other", "a", "b", "c"):
        g.add_module(module)
    for importer, imported in (("a", "b"), ("b", "c"), ("c", "a"), ("pkg", "pkg.child"), ("pkg.child", "other"),
                               ("other", "pkg.child")):
        g.add_import(importer=importer, imported=imported)
    found = cycles(g)
    assert any(text.startswith("3 modules import each other: a, b, c") for text in found)
    assert any("pkg.child, other" in text.splitlines()[0] or "other, pkg.child" in text.splitlines()[0]
               for text in found)
    g.remove_import(importer="other", imported="pkg.child")
    g.add_import(importer="other", imported="pkg")
    reentered = package_reentries(g)
    assert len(reentered) == 1 and reentered[0].startswith("the package pkg leads out to other")
    g.remove_import(importer="other", imported="pkg")
    g.add_import(importer="pkg.child", imported="pkg")
    reentered = package_reentries(g)
    assert len(reentered) == 1 and reentered[0].startswith("the package pkg imports pkg.child, which imports")
