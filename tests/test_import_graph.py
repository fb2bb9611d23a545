"""No import cycle among attnlab's modules and no upward arrow among its packages, imports inside
functions included (issue 22), and the commands' names in one home that agrees with the installed
console scripts."""

from __future__ import annotations

import ast
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from attnlab import programs

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """module -> the attnlab modules it imports anywhere in its body (functions included)."""
    modules = {_module_name(p): p for p in (SRC / "attnlab").rglob("*.py")}

    def resolve(target: str) -> str | None:  # a name imported from a module -> that module
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets |= {base, *(f"{base}.{a.name}" for a in node.names)}
        resolved = {resolve(t) for t in targets if t.startswith("attnlab")}
        # `from attnlab.x import y` names package x too; only the deepest module counts
        graph[name] = {m for m in resolved if m and m != name}
        graph[name] -= {m for m in graph[name] if any(o.startswith(m + ".") for o in graph[name])}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.slow
def test_no_import_cycle_among_attnlabs_modules():
    assert cycles(import_graph()) == []


# attnlab's packages from the bottom up (docs/architecture.md). A package imports only packages
# on lower levels and the top-level modules (attnlab.problems, attnlab.programs,
# attnlab.components); packages on one level import nothing from each other.
LEVELS = (
    ("model", "data"),  # pure PyTorch; the data modules
    ("tasks",),  # how a task's batches meet the model
    ("runs",),  # the run directory: records, checkpoints, loggers
    ("training",),  # the LightningModule and its callbacks
    ("evaluation",),  # decoding and scoring of a trained model
    ("config",),  # the composed config: schema, resolvers, composition and its error lines
    ("pipeline",),  # one run: build (the preflight: dry) the objects, fit, test, record
    ("analysis",),  # reading runs back: tables, statistics, plots
    ("sweeps",),  # launching many runs
    ("bench",),  # measuring the model and the harness
    ("cli",),  # the commands
)


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and _is_package(parts[1])) else None


def _is_package(name: str) -> bool:
    return (SRC / "attnlab" / name).is_dir()


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """`module -> imported` for each import of a package not on a lower level."""
    level = {package: i for i, names in enumerate(LEVELS) for package in names}
    arrows = []
    for module, imported in sorted(graph.items()):
        source = package_of(module)
        for target in sorted(imported):
            other = package_of(target)
            if source and other and other != source and level[other] >= level[source]:
                arrows.append(f"{module} -> {target}")
    return arrows


def test_every_package_has_a_level():
    packages = {p.name for p in (SRC / "attnlab").iterdir() if (p / "__init__.py").is_file()}
    assert packages == {name for names in LEVELS for name in names}


@pytest.mark.slow
def test_no_package_imports_a_package_above_or_beside_it():
    assert upward_arrows(import_graph()) == []


def test_the_arrow_finder_finds_an_upward_arrow():
    graph = {"attnlab.training.run": {"attnlab.config.plain", "attnlab.model.layers"}}
    assert upward_arrows(graph) == ["attnlab.training.run -> attnlab.config.plain"]


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_commands_names_are_the_installed_scripts():
    installed = entry_points(group="console_scripts")
    scripts = {e.name for e in installed if e.value.startswith("attnlab.")}
    assert {v for k, v in vars(programs).items() if k.isupper()} == scripts
