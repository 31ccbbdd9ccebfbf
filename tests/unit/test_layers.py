"""The arrows between pipeline/'s packages go one way. The layer order is the `layers` block of
docs/architecture.md (read here, so the page and this test cannot disagree): a module may import modules of
its own layer and of the layers below it, never above, and no chain of imports — module-level or inside a
function — leads back to where it started. Also: pipeline/ imports itself relatively and never imports the
CLI; cli/ reaches pipeline/ only by absolute `specq.pipeline…` imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipeline"
DOC = ROOT / "docs" / "architecture.md"


def layer_order() -> list[tuple[str, list[str]]]:
    """[(layer, packages)] from the top layer down, as docs/architecture.md lists them."""
    block = re.search(r"```layers\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block, "docs/architecture.md has no ```layers block"
    layers = []
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, packages = line.partition(":")
            layers.append((name.strip(), packages.split()))
    return layers


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name under pipeline/ ("" for pipeline/__init__.py) -> (file, is a package)."""
    out = {}
    for path in sorted(PIPELINE.rglob("*.py")):
        parts = list(path.relative_to(PIPELINE).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def imports(name: str, source: str, is_package: bool, known: set[str]) -> list[tuple[str, int, ast.stmt]]:
    """(imported pipeline module, line, node) for every import statement in `source` (the module `name`),
    at any depth: module level, inside functions, under `if TYPE_CHECKING`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if name else []
                package = here if is_package else here[:-1]
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module + ".").startswith("specq.pipeline."):
                target = node.module.removeprefix("specq.pipeline").lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import train` names a module; `from .x import f` does not
                sub = f"{target}.{alias.name}" if target else alias.name
                found.append((sub if sub in known else target, node.lineno, node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.name + ".").startswith("specq.pipeline."):
                    found.append((alias.name.removeprefix("specq.pipeline").lstrip("."), node.lineno, node))
    return found


MODULES = modules()
GRAPH = {
    name: [
        (t, line, node)
        for t, line, node in imports(name, path.read_text(encoding="utf-8"), pkg, set(MODULES))
        if t != name
    ]
    for name, (path, pkg) in MODULES.items()
}


def top(name: str) -> str:
    return name.split(".")[0]


def rank() -> dict[str, int]:
    """Top-level package or module -> its layer's height (0: foundation)."""
    layers = layer_order()
    ranks: dict[str, int] = {}
    for height, (_, packages) in enumerate(reversed(layers)):
        for p in packages:
            assert p not in ranks, f"{p} is listed in two layers of docs/architecture.md"
            ranks[p] = height
    return ranks


def test_every_package_has_a_layer() -> None:
    ranks = rank()
    tops = {top(m) for m in MODULES if m}
    assert sorted(tops - set(ranks)) == [], "add these to the layers block of docs/architecture.md"
    assert sorted(set(ranks) - tops) == [], "the layers block names packages that do not exist"


def test_no_package_imports_a_layer_above_it() -> None:
    ranks = rank()
    names = {h: n for h, (n, _) in enumerate(reversed(layer_order()))}
    bad = [
        f"pipeline/{MODULES[m][0].relative_to(PIPELINE)}:{line} imports {t} "
        f"({names[ranks[top(m)]]} -> {names[ranks[top(t)]]})"
        for m, edges in GRAPH.items()
        if m
        for t, line, _ in edges
        if t and ranks[top(t)] > ranks[top(m)]
    ]
    assert bad == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for m, edges in GRAPH.items():
        for t, _, _ in edges:
            if m and t and top(m) != top(t):
                graph.setdefault(top(m), set()).add(top(t))
    assert cycles(graph) == []


def test_no_cycle_between_modules() -> None:
    graph = {m: {t for t, _, _ in edges} for m, edges in GRAPH.items()}
    assert cycles(graph) == []


def test_pipeline_imports_itself_relatively_and_never_the_cli() -> None:
    bad = []
    for path, _ in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for mod in mods:
                if mod.split(".")[0] == "typer" or (mod + ".").startswith(("specq.pipeline.", "specq.cli.")):
                    bad.append(f"pipeline/{path.relative_to(PIPELINE)}:{node.lineno} imports {mod}")
    assert bad == []


@pytest.mark.parametrize("path", sorted((ROOT / "cli").rglob("*.py")), ids=lambda p: p.name)
def test_cli_imports_the_pipeline_absolutely(path: Path) -> None:
    bad = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level > 1
    ]
    assert bad == [], f"cli/{path.name}: use `from specq.pipeline… import …`"


def test_the_walk_resolves_every_kind_of_import() -> None:
    """The walker itself: relative imports at any depth, `from . import module`, absolute ones."""
    source = """
from ..checkpoint import Checkpoint
from . import contract
from .reports import Report
import specq.pipeline.fsutil

def f():
    from ..engines.speculation import check_draft
    from specq.pipeline.serve import create_engine
"""
    known = {"checkpoint", "draft", "draft.contract", "draft.reports", "engines.speculation", "fsutil"}
    known |= {"serve"}
    got = [t for t, _, _ in imports("draft.eval", source, False, known)]
    assert got == ["checkpoint", "draft.contract", "draft.reports", "fsutil", "engines.speculation", "serve"]
    package_source = "from .reports import R\nfrom .. import __version__"
    assert [t for t, _, _ in imports("draft", package_source, True, known)] == ["draft.reports", ""]
