"""No import cycle inside the radiance package.

The graph is read from the sources with ``ast``, so it holds every import: the top-level ones and
the function-local ones, which hide a cycle from Python (the module is already half-built when the
function runs) but still tie two modules together. Only imports of radiance's own modules count.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python" / "radiance"

# Compiled modules of the package: nodes without a source (they import nothing of radiance).
NATIVE_MODULES = ("radiance._C",)


def module_names(root):
    """{dotted module name: source path, or None for a native module} of the package at
    ``root`` (its folder)."""
    names = dict.fromkeys(m for m in NATIVE_MODULES if m.split(".")[0] == root.name)
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(node, module, is_package, modules):
    """The package's own modules that one Import / ImportFrom node of ``module`` names."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            # a package's __init__ is its own level-1 anchor; a module's is its package
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module
        # `from pkg import name` imports the module pkg.name where there is one, else the
        # name from pkg itself
        targets = [
            f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix
            for alias in node.names
        ]
    found = set()
    for target in targets:
        while target and target not in modules:  # `import a.b.c` of a name inside a.b
            target = target.rpartition(".")[0]
        if target and target != module:
            found.add(target)
    return found


def import_graph(root):
    """{module: set of the package's modules it imports anywhere in its source}."""
    modules = module_names(root)
    graph = {}
    for module, path in modules.items():
        if path is None:
            graph[module] = set()
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(node, module, is_package, modules)
        graph[module] = edges
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_holds_function_local_and_relative_imports():
    graph = import_graph(PACKAGE)
    # cli.py imports the check package only inside its functions
    assert "radiance.check.hidden" in graph["radiance.cli"]
    # `from . import _C` names the extension module; `from .format import ...` a source
    assert {"radiance._C", "radiance.format"} <= graph["radiance"]
    assert "radiance.check.methods" in graph["radiance.check.measure"]
    # `from radiance import calibration, peer_formats`: the modules, not only the package
    assert {"radiance.calibration", "radiance.peer_formats"} <= graph["radiance.check.measure"]


def test_a_cycle_through_a_function_local_import_is_found(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from . import a\n")
    (root / "sub" / "a.py").write_text("def f():\n    from ..b import g\n    return g\n")
    (root / "b.py").write_text("import os\n\ndef g():\n    from pkg.sub import a\n    return a\n")
    (root / "c.py").write_text("from .b import g\n")
    graph = import_graph(root)
    assert graph["pkg.sub.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.a"}  # the module named, not its package
    assert graph["pkg.sub"] == {"pkg.sub.a"} and graph["pkg.c"] == {"pkg.b"}
    assert cycles(graph) == [frozenset({"pkg.sub.a", "pkg.b"})]


def test_no_import_cycle_in_the_package():
    found = [sorted(c) for c in cycles(import_graph(PACKAGE))]
    assert found == [], f"import cycles in python/radiance: {found}"
