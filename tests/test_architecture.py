"""Architecture rules read from the source (issue 55): no class over ``MAX_METHODS`` methods."""

from __future__ import annotations

import ast
from pathlib import Path

import foxhunt

SRC = Path(foxhunt.__file__).resolve().parent
# Every ``def`` in a class body counts (properties, dunders and private helpers too).
MAX_METHODS = 15


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
