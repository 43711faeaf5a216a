"""CSV export: one line per row of the summary (or of the comparison)."""

import csv
import io
from pathlib import Path

from ..results import write_atomically
from .rows import rows_of


def write(data: dict, path: Path) -> None:
    rows = rows_of(data)
    fields = list(dict.fromkeys(field for row in rows for field in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(Path(path), text.getvalue())
