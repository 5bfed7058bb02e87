"""Architecture rules read from the source (issue 55): no class over ``MAX_METHODS`` methods, no
import circle among foxhunt's modules. ``tools/architecture.py`` prints where the package stands."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import grimp

import foxhunt

SRC = Path(foxhunt.__file__).resolve().parent
# Every ``def`` in a class body counts (properties, dunders and private helpers too).
MAX_METHODS = 15
REPO = Path(__file__).resolve().parents[1]


def _architecture_tool():
    """tools/architecture.py as a module: its circle finder is the one the printed measures use."""
    spec = importlib.util.spec_from_file_location("architecture_tool", REPO / "tools" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


circles = _architecture_tool().circles


def method_counts(root: Path = SRC) -> dict[str, int]:
    """Each class of the package under ``root`` (dotted ``module.Class``, nested classes as
    ``module.Outer.Inner``) and the number of ``def``s in its body."""
    counts: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}.{child.name}"
                counts[name] = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in child.body)
                visit(child, name)
            elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, prefix)  # a class under an if or a try is still the module's

    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), module)
    return counts


def test_method_counts_see_every_def_of_a_class_body(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "class A:\n"
        "    def a(self): pass\n"
        "    async def b(self): pass\n"
        "    @property\n"
        "    def c(self): return 1\n"
        "    x = 1\n"
        "    class Inner:\n"
        "        def d(self): pass\n"
        "def f():\n"
        "    class Local:\n"
        "        def e(self): pass\n"
    )
    assert method_counts(pkg) == {"pkg.mod.A": 3, "pkg.mod.A.Inner": 1}


def test_no_class_has_more_than_fifteen_methods() -> None:
    counts = method_counts()
    assert "foxhunt.serve.service.Service" in counts  # the walk sees the package
    over = {name: n for name, n in counts.items() if n > MAX_METHODS}
    listed = ", ".join(f"{name} ({n})" for name, n in sorted(over.items(), key=lambda kv: -kv[1]))
    assert not over, f"classes over {MAX_METHODS} methods: {listed}; split them by concept"


def _graph(edges: dict[str, list[str]]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in edges.items():
        graph.add_module(importer)
        for module in imported:
            graph.add_import(importer=importer, imported=module)
    return graph


def test_circles_are_the_strongly_connected_components_of_more_than_one_module() -> None:
    # a -> b -> c -> a is one circle; d <-> e another; f -> a joins none; a self-import is no circle
    graph = _graph({"a": ["b"], "b": ["c"], "c": ["a", "c"], "d": ["e"], "e": ["d"], "f": ["a"]})
    assert sorted(circles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert circles(_graph({"a": ["b"], "b": ["c"], "c": []})) == []


def test_no_import_circle_among_foxhunts_modules() -> None:
    """Every import grimp sees counts: module level, inside functions, under TYPE_CHECKING. A circle
    is broken by moving the shared piece to its own module or passing a callable in."""
    graph = grimp.build_graph("foxhunt", cache_dir=None)
    assert "foxhunt.serve.service" in graph.modules  # the graph sees the package
    found = circles(graph)
    listed = "; ".join(" <-> ".join(loop) for loop in found)
    assert not found, f"import circles: {listed}"
