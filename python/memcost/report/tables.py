"""The tables a report shows per experiment, as (caption, headings, rows) of plain strings."""

from __future__ import annotations

from ..units import format_bytes, short_size

Table = tuple[str, list[str], list[list[str]]]


def _number(value, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def costs(summary: dict) -> list[Table]:
    headings = ["page", "route", "size", "alloc µs", "free µs", "fault µs/MB", "free-after-touch µs/MB",
                "elsewhere µs/MB", "total µs/MB", "naive µs", "missed %", "faults/MB", "huge"]
    rows = [[r["page"], r["route"], short_size(r["size_bytes"]), _number(r["alloc_us"], 1), _number(r["free_us"], 1),
             _number(r["fault_us_per_mb"]), _number(r["free_after_touch_us_per_mb"]),
             _number(r["elsewhere_us_per_mb"], 1), _number(r["total_us_per_mb"]), _number(r["naive_us"], 1),
             _number(r["missed_percent"], 1), _number(r["faults_per_mb"], 1),
             "n/a" if r["huge_fraction"] is None else f"{r['huge_fraction']:.0%}"] for r in summary["rows"]]
    tables: list[Table] = [("Per-MB cost by page kind, route and size (medians)", headings, rows)]
    if summary.get("idle"):
        tables.append(("Memory reused at once vs left free first", ["page", "size", "left free", "reused µs/MB",
                                                                    "after idle µs/MB", "ratio"],
                       [[e["page"], short_size(e["size_bytes"]), f"{e['idle_seconds']:g} s",
                         _number(e["hot_fault_us_per_mb"]), _number(e["cold_fault_us_per_mb"]),
                         "n/a" if e["ratio"] is None else f"{e['ratio']:.1f}×"] for e in summary["idle"]]))
    if summary.get("shootdowns"):
        tables.append(shootdowns_table(summary["shootdowns"]))
    return tables


def shootdowns_table(entries: list[dict]) -> Table:
    headings = ["who wrote it", "free-after-touch µs/MB", "TLB shootdowns", "per MB", "µs per shootdown (receiver)",
                "on other CPUs µs/MB"]
    rows = [["one thread" if e["mode"] == "single" else f"{e['threads']} threads, still running",
             _number(e["free_after_touch_us_per_mb"]), _number(e["shootdowns"]), _number(e["shootdowns_per_mb"], 3),
             "—" if e["mode"] == "single" else _number(None if e["remote_ns_per_shootdown"] is None
                                                       else e["remote_ns_per_shootdown"] / 1e3, 1),
             "—" if e["mode"] == "single" else _number(e["remote_us_per_mb"], 2)] for e in entries]
    return (f"Freeing a written {format_bytes(entries[0]['size_bytes'])} buffer: TLB shootdowns", headings, rows)


def scaling(summary: dict) -> list[Table]:
    headings = ["block", "placement", "shape", "commit", "alloc s at max", "free s at max", "µs/call at max", "k",
                "mappings", "class"]
    rows = [[format_bytes(c["block_size_bytes"]), c["placement"], c["shape"], c["commit"],
             _number(c["alloc_total_s_at_max"], 3), _number(c["free_total_s_at_max"], 3),
             _number(c["marginal_ns_at_max"] / 1000, 2),
             "—" if c["exponent_k"] is None else f"{c['exponent_k']:.2f} [{c['exponent_ci'][0]:.2f}, {c['exponent_ci'][1]:.2f}]",
             _number(c["mappings_at_max"]), c["complexity"]] for c in summary["cases"]]
    return [(f"Scaling to {max((c['max_count'] for c in summary['cases']), default=0):,} outstanding blocks", headings, rows)]


def bigarray(summary: dict) -> list[Table]:
    tables = []
    for init in ("zero", "value"):
        rows = [r for r in summary["rows"] if r["init"] == init]
        if rows:
            tables.append((f"{format_bytes(rows[0]['size_bytes'])}, {init} initialization, ranked",
                           ["#", "strategy", "seconds", "GB/s", "of limit", "faults", "huge", "first 1 %"],
                           [[str(r["rank"]), r["strategy"], _number(r["median_s"], 3), _number(r["gb_per_s"], 1),
                             "n/a" if r["ratio_to_limit"] is None else f"{r['ratio_to_limit']:.0%}", _number(r["faults"]),
                             "n/a" if r["huge_fraction"] is None else f"{r['huge_fraction']:.0%}",
                             "" if r["first_percent_s"] is None else f"{r['first_percent_s']:.3f} s"] for r in rows]))
    return tables


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
    return [("Machine", ["", ""], rows)]


def trace(summary: dict, top: int = 15) -> list[Table]:
    """The terminal's tables too (`memcost trace`), so they are written once."""
    sites = [[r["site"], r["call"], f"{r['mappings']:,}", f"{r['freed']:,}", format_bytes(r["bytes"]),
              f"{r['faults_base']:,}", f"{r['faults_thp']:,}", _number(r["fault_ms"], 1), _number(r["free_ms"], 1),
              f"{r['churn']}× {format_bytes(r['churn_bytes'])}" if r["churn"] > 1 else "-", f"{r['wall_share']:.1%}",
              f"{r['cpu_share']:.1%}"] for r in summary["rows"][:top]]
    touching = [[r["site"], f"{r['faults']:,}", _number(r["fault_ms"], 1), r["allocation_site"]]
                for r in summary["touching"][:top]]
    return [("Allocation sites — where the memory was made",
             ["site", "call", "made", "freed", "bytes", "faults base", "faults THP", "fault ms (est.)", "free ms",
              "churn", "% wall", "% CPU"], sites),
            ("Touching sites — where the pages were faulted in", ["site", "faults", "fault ms (est.)", "memory allocated at"],
             touching)]


TABLES = {"costs": costs, "scaling": scaling, "bigarray": bigarray, "trace": trace}


def tables_for(document: dict) -> list[Table]:
    maker = TABLES.get(document["experiment"])
    return maker(document["summary"]) if maker else []
