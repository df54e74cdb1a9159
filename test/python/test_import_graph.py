"""No import loop inside the horovod_cpp package (issue 35).

Every module of bindings/horovod_cpp is parsed with `ast` (nothing is imported, so this runs
without the native module, torch or TensorFlow) and every import of another module of the
package is an edge: at module level and inside functions alike, because a deferred import
that closes a loop is still a loop (two modules that each need the other's internals; the
deferral only hides it until the function runs). An import of a package's own parent
(`from .. import x` in a subpackage) is not counted: Python has always imported the parent
first, so it cannot close a loop.
"""

import ast
import os

import pytest

PACKAGE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "bindings",
                                             "horovod_cpp"))


def module_files(root):
    """{dotted module name: path} for every .py file under the package `root`."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), os.path.dirname(root))[:-3]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = os.path.join(folder, f)
    return out


def _resolve(module, is_package, level, target):
    """The absolute name of a relative import `level` dots up from `module`."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module, path, modules):
    """The package's modules that `module` imports, anywhere in its file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    top = module.split(".")[0]
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve(module, is_package, node.level, node.module) if node.level
                    else node.module or "")
            names = [base]
            # `from pkg import sub` imports the submodule pkg.sub when there is one.
            names += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
        for name in names:
            if name.split(".")[0] != top:
                continue
            while name and name not in modules:  # `import a.b.c` of an attribute: its module
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                found.add(name)
    return found


def find_cycles(graph):
    """Every elementary loop's nodes, one list per strongly connected component of more than
    one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(root=PACKAGE_ROOT):
    modules = module_files(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def test_the_package_has_no_import_loop():
    graph = import_graph()
    assert "horovod_cpp._basics" in graph and "horovod_cpp.torch.mpi_ops" in graph
    cycles = find_cycles(graph)
    assert cycles == [], "import loops among horovod_cpp's modules: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_check_finds_a_loop_and_only_a_loop(tmp_path):
    """The check itself can fail: a deferred import that closes a loop is reported (the shape
    of the old _basics <-> _objects loop), an import of the parent package is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from . import b\n\ndef f():\n    return b\n")
    (pkg / "b.py").write_text("def g():\n    from . import a\n    return a\n")
    (pkg / "sub" / "__init__.py").write_text("from .. import a\nfrom .leaf import x\n")
    (pkg / "sub" / "leaf.py").write_text("from .. import b\nx = 1\n")
    graph = import_graph(str(pkg))
    assert graph["pkg.sub"] == {"pkg.a", "pkg.sub.leaf"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b"]]
    (pkg / "b.py").write_text("def g():\n    return 1\n")
    assert find_cycles(import_graph(str(pkg))) == []


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
