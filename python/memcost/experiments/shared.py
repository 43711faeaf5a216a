"""Options and steps several experiments share."""

from __future__ import annotations

from typing import Callable

from .. import arguments
from ..hugepool import PAGE_SIZES
from .base import Experiment, Option

# Options whose default is None are left to the probe, whose defaults are the only ones (it
# writes the values it ran with in its `settings` line, kept in params["probe_settings"]); the
# front end holds only the quick mode's values and what the probe never sees.


def budget_option() -> Option:
    return Option("budget", "memory budget (default 80%% of available memory)", parse=arguments.size, metavar="SIZE")


def hugepage_options() -> list[Option]:
    """Front-end only: memcost grows the pool around the run and sets it back."""
    return [Option("reserve_hugepages", "as root: grow the hugetlb pool by SIZE for this run, restored afterwards",
                   parse=arguments.size, metavar="SIZE", to_probe=None),
            Option("hugepage_size", "page size of the pool --reserve-hugepages grows (default 2M)", default="2M",
                   choices=sorted(PAGE_SIZES), to_probe=None)]


def measure_simple(experiment: Experiment, values: dict, directory, summarize: Callable,
                   hints: Callable[[list], list] = lambda warnings: warnings) -> dict:
    """One probe run (inside a hugetlb reservation when asked), its summary, figures and document.
    `summarize(samples)` returns the summary and any warnings the summary itself shows; `hints`
    adds the front end's own advice to the probe's warnings."""
    from ..hugepool import reserved_for_run
    from ..runner import run_with_progress
    params = dict(values)
    with reserved_for_run(values.get("reserve_hugepages"), values.get("hugepage_size", "2M"), params):
        run = run_with_progress(experiment.name, experiment.probe_arguments(values), experiment.name)
    summary, warnings = summarize(run.samples)
    params["probe_settings"] = run.settings
    return finish(experiment, run.context, params, run.samples, summary, hints(run.warnings) + warnings, directory)


def finish(experiment: Experiment, context: dict, params: dict, samples: list, summary: dict, warnings: list,
           directory) -> dict:
    """Draw the figures beside the results document, then store it."""
    from ..results import machine_label, make_document
    host = context.get("host", "")
    figures = experiment.figures(summary, machine_label(context), directory.directory_for(host))
    summary["figures"] = [path.name for path in figures]
    document = make_document(experiment.name, context, params, samples, summary, warnings)
    document["path"] = str(directory.write(document))
    return document
