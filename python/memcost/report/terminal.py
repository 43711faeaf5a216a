"""The terminal reporter: an experiment's tables and the lines under them, as rich tables."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from ..console import console
from ..experiments.base import Table
from . import reading

# Columns of names, read left-aligned; the rest are figures, right-aligned.
TEXT_HEADINGS = {"page", "route", "size", "strategy", "block", "placement", "shape", "commit", "class", "site", "call",
                 "who wrote it", "memory allocated at", "churn", "variant", "what", "value"}


# Columns that hold names of code (call paths): wide enough that a name wraps between its parts,
# never one word a line; the figures beside them keep their digits whole.
NAME_HEADINGS = {"site", "memory allocated at"}
NAME_MIN_WIDTH = 32


def print_table(table: Table) -> None:
    caption, headings, rows = table
    shown = RichTable(title=escape(caption), title_justify="left")
    for column, heading in enumerate(headings):
        if heading in NAME_HEADINGS:
            longest = max((len(str(row[column])) for row in rows), default=0)
            shown.add_column(heading, justify="left", min_width=min(NAME_MIN_WIDTH, max(longest, len(heading))),
                             overflow="fold")
        else:
            shown.add_column(heading, justify="left" if heading in TEXT_HEADINGS else "right")
    for row in rows:
        # As Text: rich neither parses a cell for markup nor looks for emoji codes in it (a trace's
        # three tables took 19 ms to print as markup strings on the 2-vCPU guest).
        shown.add_row(*[Text(str(cell)) for cell in row])
    console.print(shown)


def print_closing(document: dict) -> None:
    """What every experiment prints after its tables: the warnings, the headline, where the results are."""
    if document["warnings"]:
        console.print("[bold]Warnings[/bold]")
        for warning in document["warnings"]:
            console.print(f" • {warning['message']}", markup=False)
    if document["summary"].get("headline"):
        console.print(f"\n[bold]In short:[/bold] {escape(document['summary']['headline'])}")  # "[thp]" is no style
    console.print(f"Results: {document['path']}", markup=False)


def render(experiment, document: dict) -> None:
    """Tables, the lines under them, then the warnings, the headline and where the results are."""
    from ..results import wine_label
    summary = document["summary"]
    wine = wine_label(document["context"])
    if wine:
        console.print(f"[bold]Measured under {escape(wine)}[/bold]: every figure below describes Wine on that "
                      "host, not Windows.")
    prose = reading(experiment)
    for table in prose.tables(summary):
        print_table(table)
    for line in prose.notes(summary):
        console.print(f"  {line}", markup=False)
    print_closing(document)
