"""Markdown export: the rows as one table."""

from pathlib import Path

from ..report.markdown import table_markdown
from ..results import write_atomically
from .rows import rows_of


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def write(data: dict, path: Path) -> None:
    rows = rows_of(data)
    fields = list(dict.fromkeys(field for row in rows for field in row))
    title = data.get("experiment") or "comparison of " + ", ".join(data.get("runs", []))
    write_atomically(Path(path), table_markdown(title, fields, [[_cell(row.get(f)) for f in fields] for row in rows]))
