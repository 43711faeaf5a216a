"""No import cycles in python/memcost/: every import counts, at the top of a module or inside a
function (an import put off into a function is still a dependency the other way round). A module
importing a package's submodule does not count as importing the package's other modules."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "python" / "memcost"


def module_name(path: Path) -> str:
    parts = ["memcost", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The memcost modules `path` imports: `from X import y` is X.y where that is a module, else X."""
    return imports_of(ast.parse(path.read_text()), path, modules)


def imports_of(tree: ast.AST, path: Path, modules: set[str]) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("memcost")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("memcost"):
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycles():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in files}
    graph = {module_name(path): imports(path, modules) for path in files}
    assert len(graph) > 50 and sum(len(targets) for targets in graph.values()) > 100  # it read the package
    assert cycles(graph) == []


# The package's layers, lowest first: a module imports only from its own layer or below.
LAYERS = [
    {"memcost", "memcost.__version__", "memcost.units", "memcost.errors", "memcost.exit_codes", "memcost.console",
     "memcost.kernel", "memcost.results", "memcost.stats", "memcost.arguments", "memcost.interrupts",
     "memcost.early_signals", "memcost.journal", "memcost.tracefs", "memcost.probe", "memcost.runner",
     "memcost.hugepool", "memcost.pinning_torch", "memcost.pinned_memory"},
    {"memcost.analysis"},
    {"memcost.plots"},
    {"memcost.experiments"},
    {"memcost.report", "memcost.monitor"},
    {"memcost.export"},
    {"memcost.verify", "memcost.tracing"},  # running an experiment beyond one probe run: reruns, windows
    {"memcost.cli", "memcost.entry", "memcost.__main__"},
]
# Known and reasoned: comparing two results reads each experiment's declared comparison.
UPWARD_ALLOWED = {("memcost.analysis.compare", "memcost.experiments")}


def layer_of(module: str) -> int:
    for depth in range(module.count(".") + 1, 0, -1):
        prefix = ".".join(module.split(".")[:depth])
        for index, layer in enumerate(LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def test_no_module_imports_from_a_layer_above_its_own():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in files}
    upward = []
    for path in files:
        name = module_name(path)
        for target in imports(path, modules):
            allowed = any(name.startswith(a) and (target == b or target.startswith(b + ".")) for a, b in UPWARD_ALLOWED)
            if layer_of(target) > layer_of(name) and not allowed:
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{module_name(path)}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def declared_later(tree: ast.Module) -> set[str]:
    """The modules a file names at its top, in tuples called *_MODULES, as imported later (while the
    traced command runs, or only when a command asks for them)."""
    named = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_MODULES") for t in node.targets) \
                and isinstance(node.value, ast.Tuple):
            named |= {element.value for element in node.value.elts if isinstance(element, ast.Constant)}
    return named


def test_the_trace_wing_imports_at_module_top():
    """Every import of the trace's modules at the top, where a reader finds what a module depends on,
    or named there as imported later (a *_MODULES tuple: `memcost trace` starts its command before
    importing its analysis and report)."""
    wing = [PACKAGE / "tracing.py", PACKAGE / "experiments" / "trace.py", PACKAGE / "report" / "trace.py",
            PACKAGE / "cli" / "trace.py", *sorted((PACKAGE / "analysis" / "trace").glob("*.py"))]
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    nested = []
    for path in wing:
        tree = ast.parse(path.read_text())
        top, later = set(map(id, tree.body)), declared_later(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                module = ast.Module(body=[node], type_ignores=[])
                targets = imports_of(module, path, modules)
                if not targets or not targets <= later:
                    nested.append(f"{module_name(path)}:{node.lineno} ({', '.join(sorted(targets)) or 'not memcost'})")
    assert nested == []
