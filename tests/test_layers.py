"""The layout's rules, checked on the source tree as the wheel installs it (CONTRIBUTING.md's map).

- Layers import downwards only: a module may import its own layer and the layers below it.
- No import circles between modules, whatever layer (function-level imports count too: they run).
- A component folder holds one step: it imports the library, never another component folder.
- Every ``"module:function"`` step target in the product resolves, so a moved module cannot
  break a step only at run time.
- Data folders are found through ``importlib.resources``, not ``__file__`` arithmetic.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it installs as (pyproject's package-dir)
FOLDERS = {"shipyard": "shipyard", "components": "shipyard.components", "pipelines": "shipyard.pipelines"}
#: bottom to top; the map in CONTRIBUTING.md says the same
LAYERS = [
    "core", "schemas", "runtimes", "oci", "models", "compression", "tracking", "serving", "evaluation",
    "benchmarking", "gates", "params", "components", "pipelines", "testing", "run", "cli",
]
TARGET = re.compile(r"^(shipyard(?:\.\w+)+):(\w+)$")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if "suite" in path.relative_to(ROOT).parts:  # lm-eval task helpers, loaded by lm-eval
                continue
            found[_module(path)] = path
    return found


SOURCES = _sources()


def _imports(module: str, path: Path) -> set[str]:
    """Every shipyard module ``module`` imports (module level and inside functions)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in SOURCES else base for a in node.names]
        out.update(n for n in names if n.startswith("shipyard") and n != module)
    return out


GRAPH = {module: _imports(module, path) for module, path in SOURCES.items()}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # shipyard/__init__.py: the version
    return LAYERS.index(parts[1])


def test_every_package_has_a_layer() -> None:
    unknown = {m.split(".")[1] for m in SOURCES if "." in m and m.split(".")[1] not in LAYERS}
    assert not unknown, f"add these packages to LAYERS and CONTRIBUTING.md's map: {sorted(unknown)}"


def test_imports_run_downwards() -> None:
    upward = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
                    if t in SOURCES and layer_of(t) > layer_of(m))
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_components_do_not_import_each_other() -> None:
    def step(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "components" else None

    sideways = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
                      if step(m) and step(t) and step(m) != step(t))
    assert not sideways, "a component imports another component's folder:\n" + "\n".join(sideways)


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in SOURCES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(SOURCES):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _cycles() == []


def _targets() -> set[tuple[str, str]]:
    out = set()
    for path in SOURCES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := TARGET.match(node.value)):
                out.add((m.group(1), m.group(2)))
    return out


@pytest.mark.parametrize("module,function", sorted(_targets()))
def test_step_target_resolves(module: str, function: str) -> None:
    """Each "module:function" a wrapper or a runner names exists (heavy runtimes import lazily)."""
    assert module in SOURCES, f"{module} is not a module of the tree"
    tree = ast.parse(SOURCES[module].read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert function in defined, f"{module} defines no {function}"
    importlib.import_module(module)


def test_data_found_through_importlib_resources() -> None:
    offenders = sorted(str(p.relative_to(ROOT)) for p in SOURCES.values()
                       if re.search(r"Path\(__file__\)|\b__file__\)\.", p.read_text()))
    assert not offenders, f"find data with importlib.resources.files(...), not __file__: {offenders}"
