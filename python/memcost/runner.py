"""Running one experiment's probe with a progress display."""

from __future__ import annotations

import time
from typing import Optional

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .console import console
from .probe import ProbeRun, run_probe

PLAIN_PROGRESS_EVERY_S = 10.0


def run_with_progress(experiment: str, arguments: list[str], title: str, env: Optional[dict] = None,
                      global_arguments: Optional[list[str]] = None) -> ProbeRun:
    """A rich progress bar on a terminal; a plain line every few seconds otherwise.
    Warnings are collected in the run; the command prints them with its results."""
    if console.is_terminal:
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[label]}"), TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(title, total=None, label="")

            def on_progress(done: int, total: int, label: str) -> None:
                progress.update(task, completed=done, total=total, label=label)

            return run_probe(experiment, arguments, global_arguments=global_arguments, on_progress=on_progress, env=env)

    started = time.monotonic()
    last_line = [0.0]

    def on_plain_progress(done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if now - last_line[0] >= PLAIN_PROGRESS_EVERY_S or done == total:
            last_line[0] = now
            console.print(f"{title}: {done}/{total} {label} ({now - started:.0f} s)", markup=False)

    return run_probe(experiment, arguments, global_arguments=global_arguments, on_progress=on_plain_progress, env=env)
