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


# Class names: one name, one class (issue 55 item 6). A name two classes share is a homonym to the
# reader and to grep. Deliberate exceptions, each with its reason (none today).
SHARED_NAME_ALLOWED: dict[str, str] = {}
CONFIG_SUFFIX = "Config"
CONFIG_BASE = "Frozen"  # foxhunt.config.base.Frozen: the base of every config model


def class_definitions(root: Path = SRC) -> dict[str, list[str]]:
    """Each class name under ``root`` (module-level, nested or local to a function) and the
    modules that define it, with its base classes' names: ``name -> ["module(Base, ...)", ...]``."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                found.setdefault(node.name, []).append(f"{module}({', '.join(bases)})")
    return found


def config_classes(found: dict[str, list[str]]) -> set[str]:
    """The names of the classes that derive, directly or through other config classes, from
    :class:`foxhunt.config.base.Frozen` (names are unique, so a base is known by its name)."""
    bases = {
        name: {b for d in defs for b in d[d.index("(") + 1 : -1].split(", ") if b}
        for name, defs in found.items()
    }
    configs: set[str] = set()
    grew = True
    while grew:
        new = {n for n, bs in bases.items() if n not in configs and bs & (configs | {CONFIG_BASE})}
        configs |= new
        grew = bool(new)
    return configs


def test_class_definitions_see_local_and_nested_classes(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("class Frozen: pass\nclass XConfig(Frozen):\n    class Inner(x.Frozen): pass\n")
    (pkg / "b.py").write_text("def f():\n    class XConfig: pass\nclass Y(XConfig): pass\n")
    found = class_definitions(pkg)
    assert found["XConfig"] == ["pkg.a(Frozen)", "pkg.b()"]
    assert config_classes(
        {k: v for k, v in found.items() if k != "XConfig"} | {"XConfig": ["pkg.a(Frozen)"]}
    ) == {
        "XConfig",
        "Inner",
        "Y",
    }


def test_no_two_classes_share_a_name() -> None:
    found = class_definitions()
    assert "FoxhuntConfig" in found  # the walk sees the package
    shared = {name: defs for name, defs in found.items() if len(defs) > 1 and name not in SHARED_NAME_ALLOWED}
    listed = "; ".join(
        f"{name}: {', '.join(d.split('(')[0] for d in defs)}" for name, defs in sorted(shared.items())
    )
    assert not shared, f"class names defined more than once (name each for what it is): {listed}"


def test_every_shared_name_exception_is_still_needed() -> None:
    found = class_definitions()
    stale = sorted(name for name in SHARED_NAME_ALLOWED if len(found.get(name, ())) < 2)
    assert not stale, f"no longer shared, take them out of SHARED_NAME_ALLOWED: {', '.join(stale)}"


def test_every_config_class_ends_in_config() -> None:
    configs = config_classes(class_definitions())
    assert {"FoxhuntConfig", "OfiConfig", "BarrierConfig", "ParamSpaceConfig"} <= configs  # it sees them
    wrong = sorted(name for name in configs if not name.endswith(CONFIG_SUFFIX))
    assert not wrong, (
        f"config classes (subclasses of {CONFIG_BASE}) must end in {CONFIG_SUFFIX!r}: {', '.join(wrong)}"
    )


def test_every_builtin_family_names_its_config_class_in_config() -> None:
    """The plug-in contract (docs/feature-plugins.md): a family's ``CONFIG`` is its ``<Family>Config``,
    the type of its field of ``FeaturesConfig``."""
    from foxhunt.features.config import FeaturesConfig
    from foxhunt.features.registry import FAMILIES

    cfg = FeaturesConfig()
    for name, family in FAMILIES.items():
        assert family.CONFIG is type(getattr(cfg, name)), name
        assert family.CONFIG.__name__ == f"{name.capitalize()}{CONFIG_SUFFIX}", name
