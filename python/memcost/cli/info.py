"""`memcost info`: how this machine hands out memory."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from .. import exit_codes
from ..probe import run_probe
from ..results import make_document
from ..units import format_bytes
from ..console import console
from .base import Command


def collect() -> dict:
    """The machine description as a results document (experiment "info")."""
    run = run_probe("info")
    return make_document("info", run.context, params={}, samples=[], summary={"notes": notes(run.context)},
                         warnings=run.warnings)


def _pool_label(page_size_bytes: int) -> str:
    return f"hugetlb {format_bytes(page_size_bytes).replace(' MiB', ' MB').replace(' GiB', ' GB')}"


def notes(context: dict) -> list[str]:
    """Plain-language consequences of the machine's settings for memcost's experiments."""
    from ..results import wine_label
    result = []
    memory, pages = context["memory"], context["pages"]
    if wine_label(context):
        result.append(f"Measured under {wine_label(context)}: every figure describes Wine on that host, not Windows.")
    large = pages.get("large_pages")
    if large and large.get("offered"):
        result.append(f"Large pages ({format_bytes(large['page_bytes'])}): "
                      + ("SeLockMemoryPrivilege held, hugetlb-2M modes use them."
                         if large["privilege_held"] else f"not usable — {large['why_not']}."))
    if context.get("counters", {}).get("faults") is False:
        result.append("This system counts no page faults for a process: every fault count reads n/a, never 0.")
    thp = pages["thp"]
    # Usable or not is the probe's capability layer's verdict; info only explains it.
    # (A context from before the verdicts were recorded falls back to the mode itself.)
    thp_verdict = pages.get("verdicts", {}).get("thp") or {"usable": thp["present"] and thp["enabled"] != "never",
                                                          "why_not": f"THP is '{thp['enabled']}' here"}
    if not thp_verdict["usable"]:
        mode, hint = (thp["enabled"], "; as root, `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` to "
                      "enable them") if thp["present"] else ("not offered", "")
        result.append(f"THP: {mode} — THP rows will be skipped ({thp_verdict['why_not']}){hint}.")
    elif thp["enabled"] == "madvise":
        result.append("THP: madvise — memcost will request huge pages explicitly (MADV_HUGEPAGE).")
    elif thp["enabled"] == "always":
        result.append("THP: always — any large mapping may get huge pages; memcost turns them off explicitly "
                      "(MADV_NOHUGEPAGE) for base-page rows.")
    if thp["present"] and thp["enabled"] != "never" and thp["defrag"] in ("never", "defer"):
        result.append(f"THP defrag: {thp['defrag']} — a fault does not compact memory, so THP may fall back to "
                      "base pages when memory is fragmented; memcost reports what it really got.")
    extra_sizes = [s for s in thp["sizes"] if s["enabled"] in ("always", "madvise")
                   and s["size_bytes"] != thp["pmd_size_bytes"]]
    if extra_sizes:
        sizes = ", ".join(format_bytes(s["size_bytes"]) for s in extra_sizes)
        result.append(f"Multi-size THP enabled for {sizes}: base-page faults may be served in larger folios.")
    for pool in pages["hugetlb"]:
        label = _pool_label(pool["page_size_bytes"])
        # The probe's capability layer says how many a mapping may take (free minus reserved, never below 0).
        free = pool.get("available_pages", max(pool["free_pages"] - pool["reserved_pages"], 0))
        if pool["total_pages"] == 0:
            kib = pool["page_size_bytes"] // 1024
            result.append(f"{label} pool: 0 pages — {label} modes will be skipped; as root, "
                          f"`echo N > /sys/kernel/mm/hugepages/hugepages-{kib}kB/nr_hugepages` to enable"
                          + (" (or `sysctl vm.nr_hugepages=N`)." if pool["page_size_bytes"] == 2 << 20 else "."))
        else:
            result.append(f"{label} pool: {pool['total_pages']} pages, {free} free "
                          f"({format_bytes(free * pool['page_size_bytes'])} usable by hugetlb modes).")
    budget = f"memcost will use at most {format_bytes(memory['budget_bytes'])} " \
             f"({memory['budget_fraction']:.0%} of {format_bytes(memory['usable_bytes'])} available"
    if memory["cgroup_limit_bytes"] is not None:
        budget += f", within a cgroup {memory['cgroup_version']} limit of {format_bytes(memory['cgroup_limit_bytes'])}"
    result.append(budget + "); larger requests are refused with exit code 3.")
    if memory["overcommit_mode"] == 2:
        result.append("Overcommit mode 2 (strict): reservations count against the commit limit, "
                      "so large reserve-only sweeps may fail early.")
    hypervisor = context["hypervisor"]
    if hypervisor.get("present"):
        result.append(f"Runs under a hypervisor ({hypervisor.get('vendor') or 'unknown'}): first touch of guest memory "
                      "can also fault in the host; memcost warms up before timing and records run order.")
    if hypervisor.get("free_page_reporting"):
        result.append("The VM hands free memory back to the host (virtio-balloon free page reporting): memory that "
                      "stays free for a few seconds must be faulted in by the host again on its next use; "
                      "`memcost costs` measures what that adds (its idle part).")
    limits = context["limits"]
    if limits["max_map_count"] is not None:
        result.append(f"vm.max_map_count is {limits['max_map_count']:,}: scaling sweeps of distinct mappings stay below it.")
    if not context["capabilities"]["populate_write"]:
        result.append("This kernel lacks MADV_POPULATE_WRITE (Linux < 5.14): prefaulting falls back to touching "
                      "one byte per page.")
    counters = context["counters"]
    if not counters["steal"]:
        result.append("No steal-time counter: time taken by the hypervisor cannot be separated here.")
    for name, state in counters["perf"].items():
        if not state["available"]:
            result.append(f"perf counter {name} unavailable: {state['reason']}")
    return result


def render(document: dict) -> None:
    context = document["context"]
    memory, pages = context["memory"], context["pages"]
    table = Table(title=f"memcost info — {context['host']}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")

    def section(name: str) -> None:
        table.add_row(f"[underline]{name}[/underline]", "")

    section("Machine")
    table.add_row("CPU", f"{context['cpu']['model']} — {context['cpu']['logical_cpus']} logical CPUs, "
                         f"{context['cpu']['numa_nodes']} NUMA node(s)")
    table.add_row("OS", f"{context['os']['name']} {context['os']['release']}")
    hypervisor = context["hypervisor"]
    table.add_row("Hypervisor", (hypervisor.get("vendor") or "yes") if hypervisor.get("present") else "none detected")
    section("Memory")
    table.add_row("Total / available", f"{format_bytes(memory['total_bytes'])} / {format_bytes(memory['available_bytes'])}")
    limit = memory["cgroup_limit_bytes"]
    table.add_row("cgroup limit", f"{format_bytes(limit)} ({memory['cgroup_version']})" if limit is not None
                  else f"none ({memory['cgroup_version'] or 'no memory cgroup'})")
    table.add_row("memcost budget", f"{format_bytes(memory['budget_bytes'])} ({memory['budget_fraction']:.0%} of usable)")
    table.add_row("Swap", format_bytes(memory["swap_total_bytes"]))
    table.add_row("Overcommit mode", str(memory["overcommit_mode"]))
    section("Pages")
    table.add_row("Base page", format_bytes(pages["base_page_bytes"]))
    thp = pages["thp"]
    table.add_row("THP", f"enabled={thp['enabled']}, defrag={thp['defrag']}, PMD size {format_bytes(thp['pmd_size_bytes'])}"
                  if thp["present"] else "not available")
    if thp["sizes"]:
        on = [f"{format_bytes(s['size_bytes'])} ({s['enabled']})" for s in thp["sizes"] if s["enabled"] != "never"]
        table.add_row("mTHP sizes", (", ".join(on) or "none") + " enabled; the others never")
    for pool in pages["hugetlb"]:
        table.add_row(f"{_pool_label(pool['page_size_bytes'])} pool",
                      f"total {pool['total_pages']}, free {pool['free_pages']}, reserved {pool['reserved_pages']}, "
                      f"surplus {pool['surplus_pages']}")
    verdicts = pages.get("verdicts", {})
    if verdicts:
        table.add_row("Usable page kinds", "; ".join(kind if v["usable"] else f"{kind}: no, {v['why_not']}"
                                                     for kind, v in verdicts.items()))
    section("Limits and counters")
    table.add_row("vm.max_map_count", f"{context['limits']['max_map_count']:,}" if context['limits']['max_map_count'] else "n/a")
    perf = context["counters"]["perf"]
    table.add_row("perf counters", ", ".join(f"{n}: {'yes' if s['available'] else 'no'}" for n, s in perf.items()) or "none")
    table.add_row("MADV_POPULATE_WRITE", "yes" if context["capabilities"]["populate_write"] else "no")
    table.add_row("Probe build", f"{context['build']['compiler']}, {context['build']['build_type']}, memcost {context['tool_version']}")
    console.print(table)
    console.print("[bold]Notes[/bold]")
    for note in document["summary"]["notes"]:
        console.print(f" • {note}", markup=False)


class InfoCommand(Command):
    """Describe how this machine hands out memory: pages, pools, limits, counters.

    Prints a table with plain-language notes on what each setting means for
    memcost's experiments; --json prints the results document instead.
    """

    name = "info"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the results document as JSON")

    def run(self, args: argparse.Namespace) -> int:
        document = collect()
        if args.json:
            print(json.dumps(document, indent=1))
        else:
            render(document)
        return exit_codes.OK
