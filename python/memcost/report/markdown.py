"""summary.md: the same tables in Markdown, for pasting into an issue or a chat."""

from __future__ import annotations

from pathlib import Path

from ..results import machine_label, write_atomically
from ..experiments import REGISTRY
from . import reading, title_of


def table_markdown(caption: str, headings: list[str], rows: list[list[str]]) -> str:
    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    lines = [f"**{caption}**", "", "| " + " | ".join(escape(h) for h in headings) + " |",
             "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render(documents: dict[str, dict]) -> str:
    first = next(iter(documents.values()))
    parts = [f"# memcost — {machine_label(first['context'])}\n"]
    for name, document in documents.items():
        experiment = reading(REGISTRY.get(name))
        parts.append(f"## {title_of(name)}\n")
        parts += [sentence + "\n" for sentence in (experiment.interpret(document["summary"]) if experiment else [])]
        found = experiment.tables(document["summary"]) if experiment else []
        parts += [table_markdown(*table) for table in found]
    return "\n".join(parts)


def write(documents: dict[str, dict], directory: Path) -> Path:
    path = Path(directory) / "summary.md"
    write_atomically(path, render(documents))
    return path
