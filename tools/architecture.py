"""Architecture measures (issue 55): imports against the layers, import circles, the longest
functions and the classes with most methods. Reads the layers contract from pyproject.toml
([tool.importlinter]) unless --layers names a TOML file holding the same table, so the contract is
written once. From the repository root:

    python tools/architecture.py [--src src] [--layers FILE] [--top 10] [--json OUT]

``tests/test_architecture.py`` holds the rules (no circle, no class over 15 methods); this prints
where the package stands, for a before/after note.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tomllib
from collections import Counter
from pathlib import Path

import grimp


def layer_contract(path: Path) -> list[list[str]]:
    """The layers of the ``layers`` contract in ``path``'s [tool.importlinter], top first; each layer
    the list of its sibling packages."""
    table = tomllib.loads(path.read_text())["tool"]["importlinter"]
    for contract in table["contracts"]:
        if contract["type"] == "layers":
            return [[p.strip() for p in layer.split("|")] for layer in contract["layers"]]
    raise SystemExit(f"{path}: no layers contract in [tool.importlinter]")


def rank_of(module: str, layers: list[list[str]]) -> int | None:
    """Layer index (0 = top) of the package a module belongs to; None outside the layers."""
    for index, group in enumerate(layers):
        for package in group:
            if module == package or module.startswith(package + "."):
                return index
    return None


def against_layers(graph: grimp.ImportGraph, layers: list[list[str]]) -> list[tuple[str, str]]:
    """Direct imports from a lower layer to a higher one, or between siblings of one layer."""
    bad = []
    for importer in sorted(graph.modules):
        a = rank_of(importer, layers)
        if a is None:
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            b = rank_of(imported, layers)
            if b is None:
                continue
            pa = next(p for p in layers[a] if importer == p or importer.startswith(p + "."))
            pb = next(p for p in layers[b] if imported == p or imported.startswith(p + "."))
            if b < a or (a == b and pa != pb):
                if importer.startswith("foxhunt.config.models") and imported.endswith(".config"):
                    continue  # the root config's composition
                bad.append((importer, imported))
    return bad


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for j in range(i, len(edges[node])):
                nxt = edges[node][j]
                if nxt not in index:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def sizes(src: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Every function's length in lines and every class's count of ``def``s in its body, largest
    first, each named ``path:name`` relative to ``src``."""
    functions, classes = [], []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
            elif isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                classes.append((len(methods), f"{rel}:{node.name}"))
    return sorted(functions, reverse=True), sorted(classes, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("src"))
    parser.add_argument("--layers", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    graph = grimp.build_graph("foxhunt")
    layers = layer_contract(args.layers)
    bad = against_layers(graph, layers)
    pairs = Counter((rank_pkg(a, layers), rank_pkg(b, layers)) for a, b in bad)
    loops = circles(graph)
    functions, classes = sizes(args.src / "foxhunt")
    cli_functions = [f for f in functions if f[1].startswith("cli")]
    print(f"imports against the layers: {len(bad)} imports, {len(pairs)} package pairs")
    for (a, b), n in sorted(pairs.items()):
        print(f"  {a} -> {b}: {n}")
    for a, b in bad:
        print(f"    {a} -> {b}")
    print(f"import circles: {len(loops)}")
    for loop in loops:
        print("  " + " <-> ".join(loop))
    print(f"longest functions (lines), top {args.top}:")
    for n, name in functions[: args.top]:
        print(f"  {n:5d}  {name}")
    print(f"longest function in cli: {cli_functions[0] if cli_functions else None}")
    print(f"classes by methods, top {args.top}:")
    for n, name in classes[: args.top]:
        print(f"  {n:5d}  {name}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "against_layers": [list(x) for x in bad],
                    "circles": loops,
                    "functions": functions[: args.top],
                    "classes": classes[: args.top],
                    "cli_longest": cli_functions[:1],
                },
                indent=1,
            )
        )
    return 0


def rank_pkg(module: str, layers: list[list[str]]) -> str:
    """The layers' package a module belongs to (the module itself outside the layers)."""
    for group in layers:
        for package in group:
            if module == package or module.startswith(package + "."):
                return package
    return module


if __name__ == "__main__":
    raise SystemExit(main())
