"""The package's layout as rules: no import loops, and every layer imports only what is below it.

The import graph is read from the sources (every ``import`` statement, module-level or inside a
function, so a lazy import that only hides a loop counts as the loop).  Layers, bottom up:

- ``_core``: geometry, operand checks, the kernel registry, compilation, launches; imports nothing
  else of the package;
- kernel families ``_gemm``, ``_depthwise``, ``_direct``, ``_signal``, ``_ndimage``: ``_core`` and their own
  family only, never another family's internals;
- ``_dispatch``: algorithm registries, choice, tuning, the prepared-call cache; ``_core`` and the
  families;
- the public modules at the top (``conv``, ``backward``, ...), and ``_cli`` above everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "cupyconv"
FAMILIES = ("_gemm", "_depthwise", "_direct", "_signal", "_ndimage")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str, modules) -> str | None:
    """The package module that ``name`` (a dotted import target) refers to, if any: the longest
    prefix that is a module."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import sub`` counts as ``pkg.sub``
    where ``sub`` is a module, else as ``pkg``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # a submodule where the name is one, else the module the name is read from
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for t in targets:
                hit = _resolve(t, modules)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "cupyconv._core.geometry" in graph["cupyconv.conv"] | set().union(
        *(graph[d] for d in graph["cupyconv.conv"]))
    assert "cupyconv.conv" in graph["cupyconv"]


def test_no_import_loops():
    assert _cycles(import_graph()) == []


def test_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1].startswith("_")) else "public"


@pytest.mark.parametrize("layer,allowed", [
    ("_core", {"_core"}),
    *[(f, {"_core", f}) for f in FAMILIES],
    ("_dispatch", {"_core", "_dispatch", *FAMILIES}),
])
def test_layers_import_only_below_themselves(layer, allowed):
    bad = sorted(f"{mod} -> {dep}" for mod, deps in import_graph().items()
                 if _layer(mod) == layer for dep in deps
                 if dep != "cupyconv" and _layer(dep) not in allowed)
    assert bad == []


def test_no_module_level_name_records_its_history():
    """The top level holds the public API only: private modules live in a layer's package."""
    private_top = sorted(p.name for p in PKG.glob("_*.py") if p.name not in ("__init__.py",
                                                                            "__main__.py"))
    assert private_top == []


# --------------------------------------------------------------------------- README's table
def _readme_layout_rows() -> list[tuple[str, str]]:
    """(first cell, whole row) of every row of README.md's "Layout of the repository" table."""
    text = (PKG.parent / "README.md").read_text()
    start = text.index("## Layout of the repository")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start:end if end > 0 else None].splitlines():
        if line.startswith("| `"):
            rows.append((line.split("|")[1], line))
    return rows


def _named_in_table(rel: Path, rows) -> bool:
    """``rel`` (a path under cupyconv/) is named in a row whose first cell names its folder."""
    prefix = "cupyconv/" + ("" if rel.parent == Path(".") else rel.parent.as_posix() + "/")
    return any(f"`{prefix}" in first and (f"`{rel.name}`" in row or f"{prefix}{rel.name}`" in row)
               for first, row in rows)


def test_the_readme_layout_table_names_every_module_and_kernel_file():
    rows = _readme_layout_rows()
    assert rows
    modules = [p.relative_to(PKG) for p in PKG.rglob("*.py")
               if not (p.name == "__init__.py" and p.parent != PKG)]
    kernels = [p.relative_to(PKG) for p in (PKG / "kernel_src").rglob("*") if p.is_file()]
    assert modules and kernels
    missing = sorted(str(p) for p in modules + kernels if not _named_in_table(p, rows))
    assert missing == [], f"add these to README.md's layout table: {missing}"


def test_the_table_check_notices_a_missing_file():
    rows = [("`cupyconv/_core/`", "| `cupyconv/_core/` | `geometry.py` (...) |")]
    assert _named_in_table(Path("_core/geometry.py"), rows)
    assert not _named_in_table(Path("_core/arrays.py"), rows)
    assert not _named_in_table(Path("_gemm/geometry.py"), rows)
