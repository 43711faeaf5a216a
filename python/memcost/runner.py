"""Running one experiment's probe with a progress display."""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from typing import Optional

from .console import console
from .probe import ProbeRun, run_probe

PLAIN_PROGRESS_EVERY_S = 10.0


# `memcost run` shares one display across its experiments: (progress, overall task).
_suite: Optional[tuple[object, object]] = None


def _progress(**options):
    """A rich progress display with memcost's columns. rich.progress is imported here, on a
    terminal only: a command run by a script, or with nothing to calibrate, never pays for it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[label]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, **options)


@contextmanager
def suite_progress(experiments: int):
    """One progress display for a whole `memcost run` (an overall bar above each experiment's
    own); yields the function that marks an experiment done. Without a terminal there is no
    display: the run's plain lines say where it is."""
    global _suite
    if not console.is_terminal:
        yield lambda name: None
        return
    with _progress() as progress:
        overall = progress.add_task("memcost run", total=experiments, label="")
        _suite = (progress, overall)
        try:
            yield lambda name: progress.update(overall, advance=1, label=f"{name} done")
        finally:
            _suite = None


def run_with_progress(experiment: str, arguments: list[str], title: str, env: Optional[dict] = None,
                      global_arguments: Optional[list[str]] = None) -> ProbeRun:
    """A rich progress bar on a terminal (inside `memcost run`'s display when there is one);
    a plain line every few seconds otherwise. Warnings are collected in the run; the command
    prints them with its results."""
    shared = _suite[0] if _suite else None

    def on_warning(warning: dict) -> None:
        # The run's estimate is said when the probe makes it, before the run (bigarray); other
        # warnings are printed with the results.
        if warning.get("code") == "estimate":
            console.print(f"{title}: estimated {warning['message']}", markup=False)
    if console.is_terminal:
        progress = shared or _progress(transient=True)
        with (nullcontext() if shared else progress):
            task = progress.add_task(title, total=None, label="")

            def on_progress(done: int, total: int, label: str) -> None:
                progress.update(task, completed=done, total=total, label=label)
            try:
                return run_probe(experiment, arguments, global_arguments=global_arguments, on_progress=on_progress,
                                 on_warning=on_warning, env=env)
            finally:
                progress.remove_task(task)

    started = time.monotonic()
    last_line = [0.0]

    def on_plain_progress(done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if now - last_line[0] >= PLAIN_PROGRESS_EVERY_S or done == total:
            last_line[0] = now
            console.print(f"{title}: {done}/{total} {label} ({now - started:.0f} s)", markup=False)

    return run_probe(experiment, arguments, global_arguments=global_arguments, on_progress=on_plain_progress,
                     on_warning=on_warning, env=env)
