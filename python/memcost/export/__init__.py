"""Exports of a results document or a comparison: one module per format, one
function each, `write(data, path)`."""

from __future__ import annotations

from ..console import console
from . import csv_format, json_format, markdown_format

FORMATS = {"json": json_format.write, "csv": csv_format.write, "markdown": markdown_format.write}


def add_arguments(parser) -> None:
    from ..arguments import output_file
    parser.add_argument("--export-json", type=output_file, metavar="PATH", help="also write the data as JSON")
    parser.add_argument("--export-csv", type=output_file, metavar="PATH", help="also write its rows as CSV")
    parser.add_argument("--export-markdown", type=output_file, metavar="PATH", help="also write its tables as Markdown")


def export_requested(data: dict, args) -> None:
    """Write each export the command's flags asked for, and say where."""
    for name, write in FORMATS.items():
        path = getattr(args, f"export_{name}", None)
        if path:
            write(data, path)
            console.print(f"Exported: {path}", markup=False)
