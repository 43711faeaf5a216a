"""Exports of a results document or a comparison: one module per format, one
function each, `write(data, path)`."""

from __future__ import annotations

import importlib

# Each format's module, imported only when its export is asked for (markdown's pulls in every
# experiment's report: tens of milliseconds that a short `memcost trace` should not pay).
FORMATS = {"json": "json_format", "csv": "csv_format", "markdown": "markdown_format"}


def add_arguments(parser) -> None:
    from ..arguments import output_file
    parser.add_argument("--export-json", type=output_file, metavar="PATH", help="also write the data as JSON")
    parser.add_argument("--export-csv", type=output_file, metavar="PATH", help="also write its rows as CSV")
    parser.add_argument("--export-markdown", type=output_file, metavar="PATH", help="also write its tables as Markdown")


def export_requested(data: dict, args) -> None:
    """Write each export the command's flags asked for, and say where."""
    for name, module in FORMATS.items():
        path = getattr(args, f"export_{name}", None)
        if path:
            importlib.import_module(f"{__name__}.{module}").write(data, path)
            from ..console import console
            console.print(f"Exported: {path}", markup=False)
