"""`info`: how this machine hands out memory. An experiment of the machine alone: one probe run that
reports only its context line, summarized into the machine's table, its notes and a headline."""

from __future__ import annotations

from ..units import format_bytes
from .base import Experiment, Table


def _pool_label(page_size_bytes: int) -> str:
    return f"hugetlb {format_bytes(page_size_bytes).replace(' MiB', ' MB').replace(' GiB', ' GB')}"


def machine_rows(context: dict) -> list[list[str]]:
    """The machine's table, read from the context line, section by section."""
    from ..results import wine_label
    memory, pages, thp = context["memory"], context["pages"], context["pages"]["thp"]
    hypervisor = context["hypervisor"]
    rows = [["CPU", f"{context['cpu']['model']}, {context['cpu']['logical_cpus']} logical CPUs, "
                    f"{context['cpu']['numa_nodes']} NUMA node(s)"],
            ["OS", f"{context['os']['name']} {context['os']['release']}"],
            ["Hypervisor", (hypervisor.get("vendor") or "yes") if hypervisor.get("present") else "none detected"]]
    if context.get("wine"):
        rows.append(["Wine", wine_label(context) + ": figures describe Wine, not Windows"])
    limit = memory["cgroup_limit_bytes"]
    rows += [["Memory", f"{format_bytes(memory['total_bytes'])} total, {format_bytes(memory['available_bytes'])} available"],
             ["cgroup limit", f"{format_bytes(limit)} ({memory['cgroup_version']})" if limit is not None
              else f"none ({memory['cgroup_version'] or 'no memory cgroup'})"],
             ["memcost budget", f"{format_bytes(memory['budget_bytes'])} ({memory['budget_fraction']:.0%} of usable)"],
             ["Swap", format_bytes(memory["swap_total_bytes"])],
             ["Overcommit mode", str(memory["overcommit_mode"])],
             ["Base page", format_bytes(pages["base_page_bytes"])],
             ["THP", f"enabled={thp['enabled']}, defrag={thp['defrag']}, PMD size {format_bytes(thp['pmd_size_bytes'])}"
              if thp["present"] else "not available"]]
    if thp["sizes"]:
        on = [f"{format_bytes(s['size_bytes'])} ({s['enabled']})" for s in thp["sizes"] if s["enabled"] != "never"]
        rows.append(["mTHP sizes", (", ".join(on) or "none") + " enabled; the others never"])
    for pool in pages["hugetlb"]:
        rows.append([f"{_pool_label(pool['page_size_bytes'])} pool",
                     f"total {pool['total_pages']}, free {pool['free_pages']}, reserved {pool['reserved_pages']}, "
                     f"surplus {pool['surplus_pages']}"])
    large = pages.get("large_pages")
    if large and large.get("offered"):
        rows.append(["Large pages", f"{format_bytes(large['page_bytes'])}, "
                                    + ("privilege held" if large["privilege_held"] else "not usable: " + large["why_not"])])
    verdicts = pages.get("verdicts", {})
    if verdicts:
        rows.append(["Usable page kinds", "; ".join(kind if v["usable"] else f"{kind}: no, {v['why_not']}"
                                                    for kind, v in verdicts.items())])
    max_map_count = context["limits"]["max_map_count"]
    perf = context["counters"]["perf"]
    rows += [["vm.max_map_count", f"{max_map_count:,}" if max_map_count else "n/a"],
             ["perf counters", ", ".join(f"{n}: {'yes' if s['available'] else 'no'}" for n, s in perf.items()) or "none"],
             ["MADV_POPULATE_WRITE", "yes" if context["capabilities"]["populate_write"] else "no"],
             ["Probe build", f"{context['build']['compiler']}, {context['build']['build_type']}, "
                             f"memcost {context['tool_version']}"]]
    return rows


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


def headline(context: dict) -> str:
    thp = context["pages"]["thp"]
    pools = [p for p in context["pages"]["hugetlb"] if p["total_pages"]]
    return (f"{context['cpu']['logical_cpus']} CPUs, THP {thp['enabled'] if thp['present'] else 'absent'}, "
            f"{'hugetlb pools ready' if pools else 'no hugetlb pages'}, "
            f"budget {context['memory']['budget_bytes'] / (1 << 30):.1f} GiB")


def describe(context: dict) -> dict:
    """The summary: what `measure` stores and `memcost import` makes of a captured context line."""
    return {"machine": machine_rows(context), "notes": notes(context), "headline": headline(context)}


def measure(values: dict, directory) -> dict:
    from ..probe import run_probe
    from .shared import finish
    run = run_probe("info")
    return finish(EXPERIMENT, run.context, {"probe_settings": run.settings}, [], describe(run.context), run.warnings,
                  directory)


def tables(summary: dict) -> list[Table]:
    return [("Machine", ["what", "value"], summary["machine"])] if "machine" in summary else []


EXPERIMENT = Experiment(
    name="info",
    title="The machine",
    summary="Describe how this machine hands out memory: pages, pools, limits, counters.",
    measure=measure,
    from_context=describe,
    tables=tables,
    notes=lambda summary: summary["notes"],
)
