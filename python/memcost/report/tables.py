"""The machine's table in a report (each experiment declares its own tables in experiments/)."""

from __future__ import annotations

from ..experiments.base import Table
from ..results import wine_label
from ..units import format_bytes


def info(document: dict) -> list[Table]:
    context = document["context"]
    memory, pages = context["memory"], context["pages"]
    rows = [["CPU", f"{context['cpu']['model']}, {context['cpu']['logical_cpus']} logical CPUs, "
                    f"{context['cpu']['numa_nodes']} NUMA node(s)"],
            ["OS", f"{context['os']['name']} {context['os']['release']}"],
            ["Hypervisor", (context["hypervisor"].get("vendor") or "yes") if context["hypervisor"].get("present") else "none"],
            ["Memory", f"{format_bytes(memory['total_bytes'])} total, {format_bytes(memory['available_bytes'])} available, "
                       f"budget {format_bytes(memory['budget_bytes'])}"],
            ["THP", f"{pages['thp']['enabled']} (defrag {pages['thp']['defrag']})" if pages["thp"]["present"] else "absent"],
            ["hugetlb pools", ", ".join(f"{format_bytes(p['page_size_bytes'])}: {p['free_pages']} free of {p['total_pages']}"
                                        for p in pages["hugetlb"]) or "none"],
            ["memcost", context["tool_version"]]]
    if context.get("wine"):
        rows.insert(2, ["Wine", wine_label(context) + " — figures describe Wine, not Windows"])
    large = pages.get("large_pages")
    if large and large.get("offered"):
        rows.insert(-1, ["Large pages", f"{format_bytes(large['page_bytes'])}, "
                                        + ("privilege held" if large["privilege_held"] else "not usable: " + large["why_not"])])
    return [("Machine", ["", ""], rows)]
