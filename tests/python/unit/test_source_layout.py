"""The plan of the C and C++ sources holds (docs/architecture.md): no include circle anywhere in
src/, no platform test outside src/os/, the tracer's units in its stage folders, and no probe
source file past 600 lines."""

import re
from pathlib import Path

from conftest import ROOT

SOURCE = ROOT / "src"
SUFFIXES = {".c", ".cpp", ".h", ".hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources() -> list[Path]:
    return sorted(path for path in SOURCE.rglob("*") if path.suffix in SUFFIXES)


def include_graph() -> dict[str, set[str]]:
    """Each file (relative to src/) and the files of src/ it includes; a .c/.cpp file and its own
    header are one unit, as a reader sees them."""
    def unit(path: str) -> str:
        return re.sub(r"\.(c|cpp|h|hpp)$", "", path)
    graph: dict[str, set[str]] = {}
    for path in sources():
        name = unit(str(path.relative_to(SOURCE)))
        targets = {unit(target) for target in INCLUDE.findall(path.read_text()) if (SOURCE / target).exists()}
        graph.setdefault(name, set()).update(targets - {name})
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One include circle, as the list of units around it, or []."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[node] = 2
        path.pop()
        return []
    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_include_circle_anywhere_in_src():
    assert cycle(include_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_only_the_os_layer_tests_the_platform():
    tested = [str(path.relative_to(SOURCE)) for path in sources()
              if not path.is_relative_to(SOURCE / "os") and re.search(r"\b(_WIN32|__linux__)\b", path.read_text())]
    assert tested == []


def test_the_tracer_keeps_only_its_entry_point_outside_its_stage_folders():
    loose = sorted(path.name for path in (SOURCE / "trace").iterdir() if path.is_file())
    assert loose == ["tracer.hpp", "tracer_linux.cpp", "tracer_windows.cpp"]


def test_no_probe_source_file_is_over_600_lines():
    long_files = {str(path.relative_to(SOURCE)): lines for path in (SOURCE / "probe").rglob("*")
                  if path.suffix in SUFFIXES and (lines := len(path.read_text().splitlines())) > 600}
    assert long_files == {}
