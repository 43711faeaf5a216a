"""The terminal: one console for output, one for errors and warnings."""

from rich.console import Console

# rich drops colour and live displays by itself when stdout is not a terminal;
# it would also wrap tables at 80 columns, too narrow for logs and files.
console = Console(highlight=False)
if not console.is_terminal:
    console = Console(highlight=False, width=160)
errors = Console(stderr=True, highlight=False)


def fail(message: str) -> None:
    """One line that says what was wrong and what to do."""
    errors.print(f"memcost: error: {message}", markup=False, soft_wrap=True)


def warn(message: str) -> None:
    errors.print(f"memcost: warning: {message}", markup=False, soft_wrap=True)
