"""The package's layout is its architecture: imports only run downwards.

Every import of `keras_attn_zoo` code (at module level or inside a function)
is read from the source. A package may import only packages of a lower or its
own rank, and no two modules may import each other, directly or around a loop.
`python -m tests.test_layering` prints the package graph.
"""

import ast
import collections
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_attn_zoo"
README = PACKAGE.parent / "README.md"

# Lower ranks know nothing of higher ones: data and layers know no model, models
# know no search or trainer, the searches no translator, the translator no
# exporter or trainer (the trainer's monitors take the run's translator from
# `inference`, not from the exporter), the trainer no recipe; the leaderboard
# trains its cells through the workflow, beside it.
RANKS = {
    "runtime": 0,
    "files": 0,
    "data": 0,
    "layers": 1,
    "optimizers": 1,
    "models": 2,
    "decoding": 3,
    "inference": 4,
    "evaluation": 5,
    "export": 6,
    "training": 7,
    "workflow": 8,
    "leaderboard": 8,
    "cli": 9,
}


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source, modules):
    """Zoo modules that `source` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def import_graph():
    """`{module: {imported zoo module, ...}}` over every file of the package.

    Left out: the root package (it re-exports lazily, PEP 562) and a package's
    `__init__` importing its own submodules (re-exports, not dependencies).
    """
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = collections.defaultdict(set)
    for module, path in paths.items():
        if module == "keras_attn_zoo":
            continue
        is_package = path.name == "__init__.py"
        for target in imported_modules(path.read_text(encoding="utf-8"), paths):
            if target in (module, "keras_attn_zoo"):
                continue
            if is_package and target.startswith(module + "."):
                continue
            graph[module].add(target)
    return graph


def package_of(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_edges(graph):
    edges = []
    for module, imported in graph.items():
        for target in imported:
            source_package, target_package = package_of(module), package_of(target)
            if source_package == target_package:
                continue
            if RANKS.get(target_package, 99) > RANKS.get(source_package, -1):
                edges.append((module, target))
    return sorted(edges)


def cycles(graph):
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_package_has_a_rank():
    packages = {package_of(module) for module in import_graph()} - {None}
    assert packages <= set(RANKS), sorted(packages - set(RANKS))


def test_no_import_runs_upwards():
    assert upward_edges(import_graph()) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def readme_ranks():
    """`{package: rank}` as the README's Layout lists them (`  name/   rank  ...`)."""
    layout = README.read_text(encoding="utf-8").split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return {match[1]: int(match[2])
            for match in re.finditer(r"^  (\w+)(?:/|\.py)\s+(\d+)\s", layout, re.MULTILINE)}


def test_the_readme_lists_every_rank_as_ranks_does():
    assert readme_ranks() == RANKS


def test_every_top_level_module_and_package_has_a_rank():
    names = {path.stem if path.is_file() else path.name
             for path in PACKAGE.iterdir()
             if (path.suffix == ".py" and path.stem != "__init__")
             or (path / "__init__.py").exists()}
    assert names == set(RANKS)


def test_the_reader_sees_imports_inside_functions():
    modules = {"keras_attn_zoo.models", "keras_attn_zoo.models.zoo_model"}
    source = "def build():\n    from keras_attn_zoo.models import zoo_model\n"
    assert imported_modules(source, modules) == modules


if __name__ == "__main__":
    graph = import_graph()
    packages = collections.defaultdict(set)
    for module, imported in graph.items():
        for target in imported:
            if package_of(module) != package_of(target) and package_of(target):
                packages[package_of(module) or "(root)"].add(package_of(target))
    for package in sorted(packages, key=lambda name: RANKS.get(name, -1)):
        print(f"{package} -> {', '.join(sorted(packages[package], key=RANKS.get))}")
    print("upward edges:", upward_edges(graph) or "none")
    print("cycles:", cycles(graph) or "none")
