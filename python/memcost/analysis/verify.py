"""`trace --verify`: which advice the preload library can apply from outside the program, the
call-path keys that find its site again in an untraced run, and what the interleaved runs
measured (docs/trace.md, "Verifying advice"). The runs themselves: verify.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import median
from typing import Optional

from ..stats import bootstrap_median_interval, spread
from .trace.frames import frames_of
from .trace.records import Trace
from .trace.sites import allocation_names, allocation_site

# The runtime's own code, left out of call paths on both sides: the same list as
# src/trace/preload/apply_advice.c's runtime_module().
RUNTIME_MODULES = ("libc.so", "libc-", "ld-linux", "ld64.so", "libmemcost-preload", "libstdc++", "libgcc_s",
                   "libpthread")
KEY_FRAMES = 4            # MEMCOST_APPLY_MAX_FRAMES
MIN_SAVING_MS = 1.0       # advice estimated below this is not worth a rerun
SPREAD_LIMIT = 0.20       # the baseline's interquartile range over its median, above which runs are not compared
MIN_BYTES = 64 << 10      # calls smaller than this are never advised (the preload library's reporting floor)
HUGE_MIN_BYTES = 4 << 20  # huge pages are advised for mappings of two huge pages or more
POPULATE_MIN_BYTES = 64 << 20
# What the preload library does for each kind of advice (apply_advice.h); the pinned-memory
# advice is the pinning stand-in's (src/trace/preload/pinning_standin.c).
ACTIONS = {"huge_pages": "huge", "reuse": "reuse", "parallel": "populate"}
PINNED = "pinned_memory"
PINNING_MIN_BYTES = 4 << 20  # two huge pages: a smaller pinning call gains little from them
WHAT_IS_APPLIED = {
    "huge": "MADV_HUGEPAGE on the site's blocks, started on a 2 MiB boundary as make_big_array starts them "
            "(a calloc block: its 2 MiB-aligned inside)",
    "reuse": "freed blocks of the site kept (two at most) and handed back to it, cleared to zero first as fresh "
             "memory reads: the clearing is part of the measured cost",
    "populate": "the site's blocks faulted in at allocation with MADV_POPULATE_WRITE on {threads} threads",
    "tunable": "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 for the whole command: glibc's malloc asks for huge pages "
               "(madvise) on the memory it maps, no code changed",
    "pinned": "every cudaHostAlloc, cudaMallocHost and cudaHostRegister of 4 MiB or more served by memcost's preloaded "
              "stand-in: mapped on 2 MiB huge pages, faulted in on {threads} threads, then registered with the "
              "runtime's cudaHostRegister",
}
MALLOC_CALLS = ("malloc", "realloc")  # the site's memory came through malloc: a malloc tunable may do the job
MALLOC_FUNCTIONS = ("malloc", "calloc", "realloc", "__libc_malloc", "__libc_calloc", "__libc_realloc", "sysmalloc",
                    "_int_malloc")


@dataclass
class Variant:
    """One advice applied alone in its runs."""
    id: int
    site: str
    kind: str
    action: str
    estimated_saving_ms: Optional[float]  # None: no estimate (pinning, where `memcost pinned` has not run)
    page_kind: str            # the site's: base or thp (its row's "kind")
    min_bytes: int
    threads: int
    keys: list = field(default_factory=list)  # call paths, each a list of "module:hexoffset"
    expected_faults_saved: int = 0  # what the advice promised (huge pages: base-page faults no longer taken)
    undone_by: Optional[str] = None  # the program's own call that works against it (madvise MADV_NOHUGEPAGE at ...)

    def spec_lines(self, action: Optional[str] = None) -> list[str]:
        """For the preload library (apply_advice.h); a tunable needs none. `action` "none": found
        and left alone, as the runs without advice do."""
        return [f"{self.id} {action or self.action} {self.min_bytes} {self.threads} {' '.join(key)}"
                for key in self.keys]

    @property
    def environment(self) -> dict:
        """What the variant's runs add to the environment: a malloc tunable, or the pinning
        stand-in's configuration."""
        if self.action == "tunable":
            return {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
        if self.action == "pinned":
            return {"MEMCOST_PINNING": f"{self.id} {self.min_bytes} {self.threads}"}
        return {}


def call_path_key(frames: list) -> Optional[list[str]]:
    """The innermost native frames outside the runtime, as the preload library sees them: the
    module's file name and the return address's offset from the module's start (a frame's
    address is the call, one byte before it). None when no such frame has a module."""
    key, last = [], None
    for frame in frames:
        if frame.get("kind", "native") != "native":
            continue  # inlined frames share their caller's address; Python and JIT frames have none to match
        module = Path(frame.get("module") or "").name
        if not module:
            break  # code in no module (JIT-compiled): nothing further is matchable
        if module.startswith(RUNTIME_MODULES):
            continue
        entry = f"{module}:{frame['module_offset'] + 1:x}"
        if entry != last:
            key.append(entry)
            last = entry
        if len(key) == KEY_FRAMES:
            break
    return key or None


def plan(trace: Trace, summary: dict, params: dict, threads: int) -> tuple[list[Variant], list[dict]]:
    """The advice to verify, one variant each, and the advice that cannot be, each with its reason."""
    names = allocation_names(trace, frames_of(params))
    stacks_of: dict[str, list[int]] = {}
    for origin in trace.origins:
        stacks_of.setdefault(allocation_site(names, origin["stack"], origin["call"]), []).append(origin["stack"])
    variants, unverifiable = [], []
    for row in summary["rows"]:
        for item in row["advice"]:
            if item["saving_ms"] < MIN_SAVING_MS:
                continue
            reason = _why_not(row, item)
            keys = [] if reason else _unique(call_path_key(trace.stacks.get(stack, [])) for stack in stacks_of.get(row["site"], []))
            if not reason and not keys:
                reason = "its call path runs through no module the preload library can find again (JIT-compiled code)"
            if reason:
                unverifiable.append({"site": row["site"], "kind": item["kind"], "estimated_saving_ms": item["saving_ms"],
                                     "verified": False, "reason": reason})
                continue
            action = ACTIONS[item["kind"]]
            # A churned size is the mapping's; the call that asked for it may be smaller (malloc's
            # header, page rounding): half of it finds the calls, the kept blocks match sizes exactly.
            least = {"huge": HUGE_MIN_BYTES, "reuse": max(row["churn_bytes"] // 2, MIN_BYTES),
                     "populate": POPULATE_MIN_BYTES}[action]
            variants.append(Variant(len(variants) + 1, row["site"], item["kind"], action, item["saving_ms"],
                                    row["kind"], least, threads, keys, item.get("faults_saved", 0), item.get("undone_by")))
            if item["kind"] == "huge_pages" and _through_malloc(row, [trace.stacks.get(s, []) for s in stacks_of[row["site"]]]):
                variants.append(Variant(len(variants) + 1, row["site"], item["kind"], "tunable", item["saving_ms"],
                                        row["kind"], least, threads, []))
    asked = params.get("verify_only")
    for item in summary.get("pinning", []):
        # The call's own time bounds what the fast way can save; the estimate, where `memcost
        # pinned` has run on this host, is its share of that.
        if item["call_ms"] < MIN_SAVING_MS:
            continue
        if not item.get("verifiable"):
            unverifiable.append({"site": item["site"], "kind": PINNED, "estimated_saving_ms": item.get("saving_ms"),
                                 "verified": False, "reason": item["verify"].removeprefix("not applied by --verify: ")})
            continue
        variants.append(Variant(len(variants) + 1, item["site"], PINNED, "pinned", item.get("saving_ms"), "base",
                                PINNING_MIN_BYTES, threads))
    if asked:
        # --verify-only: the other kinds are left for another run (each costs rounds of the command).
        unverifiable += [{"site": v.site, "kind": v.kind, "estimated_saving_ms": v.estimated_saving_ms, "verified": False,
                          "reason": f"not asked for (--verify-only {','.join(asked)})"}
                         for v in variants if v.kind not in asked]
        variants = [replace(v, id=number) for number, v in enumerate((v for v in variants if v.kind in asked), 1)]
    return variants, unverifiable


def _through_malloc(row: dict, stacks: list[list]) -> bool:
    """The site's memory came through malloc: called so (the preload library saw the call), or the
    kernel saw glibc's own mmap inside malloc."""
    return row["call"] in MALLOC_CALLS or any(
        frame.get("function", "").split("@")[0] in MALLOC_FUNCTIONS and Path(frame.get("module") or "").name.startswith("libc")
        for frames in stacks for frame in frames)


def _why_not(row: dict, item: dict) -> Optional[str]:
    if item["kind"] == "growth":
        return ("only the source can reserve the final size (reserve() before the growth): when the first buffer is "
                "made, nothing outside the program knows how large it will grow")
    if row.get("runtime") == "jvm":
        return "the JVM's own flags apply it (named in the advice); memcost does not restart the JVM with other flags"
    if item["kind"] not in ACTIONS:
        return f"memcost cannot apply {item['kind']} advice from outside the program"
    return None


def _unique(keys) -> list:
    seen, result = set(), []
    for key in keys:
        if key and tuple(key) not in seen:
            seen.add(tuple(key))
            result.append(key)
    return result


def spread_of(values: list[float]) -> float:
    """Interquartile range over the median: the baseline's own noise."""
    measured = spread(values)
    return measured.iqr / measured.median if measured and measured.median > 0 else 0.0


def refusal(baseline: list[dict], first: Optional[dict] = None) -> Optional[str]:
    """Why the command's runs cannot be compared, or None: `baseline` the runs without advice,
    `first` the run that timed the command (its exit code counts, its time does not: it may have
    read files the later runs find cached)."""
    codes = sorted({run["exit_code"] for run in baseline + ([first] if first else [])})
    if len(codes) > 1:
        return (f"its exit code differs between identical runs ({', '.join(map(str, codes))}): the advised runs cannot "
                "be told apart from its own variation")
    walls = [run["wall_ms"] for run in baseline]
    if len(walls) >= 3 and spread_of(walls) > SPREAD_LIMIT:
        return (f"its own run time varies too much to compare (interquartile range {spread_of(walls):.0%} of the median "
                f"over {len(walls)} identical runs; the limit is {SPREAD_LIMIT:.0%})")
    return None


TOOK_EFFECT_SHARE = 0.25  # an advice that saved less than this share of the faults it promised did not take effect


def evaluate(variant: Variant, baseline: dict[int, dict], advised: dict[int, dict], applied: bool, seed: int,
             overridden: bool = False) -> dict:
    """Paired by round: the baseline's run minus the advised run, for wall time, CPU time and
    faults; the median saving with its bootstrap interval. An applied advice that did not change
    what it should have (the faults it promised) did not take effect, and the verdict says why.
    `overridden`: the preload library skipped the program's own call that works against it."""
    rounds = sorted(set(baseline) & set(advised))
    result = {"id": variant.id, "site": variant.site, "kind": variant.kind, "page_kind": variant.page_kind,
              "action": variant.action,
              "applied": WHAT_IS_APPLIED[variant.action].format(threads=variant.threads),
              "estimated_saving_ms": variant.estimated_saving_ms, "rounds": len(rounds), "overridden": overridden}
    reference = baseline[rounds[0]] if rounds else None
    changed = [advised[r] for r in rounds if (advised[r]["exit_code"], advised[r]["stdout_sha256"])
               != (reference["exit_code"], reference["stdout_sha256"])] if reference else []
    for name, key in (("saving_ms", "wall_ms"), ("cpu_saving_ms", "cpu_ms"), ("faults_saved", "faults")):
        differences = [baseline[r][key] - advised[r][key] for r in rounds]
        result[f"measured_{name}"] = median(differences) if differences else None
        result[f"measured_{name.replace('_ms', '')}_interval{'_ms' if name.endswith('_ms') else ''}"] = (
            list(bootstrap_median_interval(differences, seed=seed)) if len(differences) >= 2 else None)
    low, high = result["measured_saving_interval_ms"] or (None, None)
    if not applied:
        result.update(verified=False, verdict="not applied: its call path was not found again")
    elif changed:
        result.update(verified=False, unsafe=True,
                      verdict=f"unsafe: exit code or output changed ({len(changed)} of {len(rounds)} runs)")
    elif variant.expected_faults_saved and (result["measured_faults_saved"] or 0) < TOOK_EFFECT_SHARE * variant.expected_faults_saved:
        why = (f"the program's own madvise(MADV_NOHUGEPAGE) at {variant.undone_by} turns huge pages off again"
               if variant.undone_by and not overridden else
               "the kernel gave no huge pages (memory too fragmented to assemble them, or THP defrag off)")
        result.update(verified=False, verdict=f"did not take effect: it saved {result['measured_faults_saved'] or 0:,.0f} "
                                              f"faults of the ≈ {variant.expected_faults_saved:,} it should have; {why}")
    elif low is not None and low > 0:
        result.update(verified=True, verdict="saving shown")
    elif high is not None and high < 0:
        result.update(verified=True, verdict="slower, shown")
    else:
        result.update(verified=False, verdict="not shown by measurement")
    measured = result["measured_saving_ms"]
    result["estimate_ratio"] = (variant.estimated_saving_ms / measured
                                if result["verified"] and measured and measured > 0 and variant.estimated_saving_ms
                                else None)
    return result


def not_compared(result: dict) -> dict:
    """An advice of a command refused for its own variation: whether it was applied, and the faults
    it saved (the kernel's count does not drift with the host), but no saving of time."""
    for key in ("measured_saving_ms", "measured_saving_interval_ms", "measured_cpu_saving_ms",
                "measured_cpu_saving_interval_ms", "estimate_ratio"):
        result[key] = None
    result["verified"] = False
    if not result["verdict"].startswith(("not applied", "unsafe", "did not take effect")):
        result["verdict"] = "not compared: the command's own time varies too much"
    return result


LEARNED_FROM = 10  # the newest verified traces of this host an estimate is corrected by


def _program(summary: dict) -> str:
    command = summary.get("totals", {}).get("command") or [""]
    return Path(command[0]).name


def learned_ratios(documents) -> dict[tuple, tuple[float, int]]:
    """Estimate ÷ measured, as a median and how many, over the advice that earlier verifications
    of this host measured (`documents`: its trace documents, newest first), keyed two ways: by
    (program, site, advice kind), and by (advice kind, page kind) for sites never verified."""
    ratios: dict[tuple, list[float]] = {}
    used = 0
    for document in documents:
        summary = document.get("summary", {})
        verification = summary.get("verification") or {}
        found = [v for v in verification.get("variants", [])
                 if v.get("verified") and v.get("estimate_ratio") and v.get("action") != "tunable"]
        for variant in found:
            ratios.setdefault((_program(summary), variant["site"], variant["kind"]), []).append(variant["estimate_ratio"])
            ratios.setdefault((variant["kind"], variant.get("page_kind", "base")), []).append(variant["estimate_ratio"])
        used += bool(found)
        if used == LEARNED_FROM:
            break
    return {key: (median(values), len(values)) for key, values in ratios.items()}


def correct_estimates(summary: dict, ratios: dict[tuple, tuple[float, int]]) -> None:
    """Each advice's estimate divided by what verification on this host found it worth: this
    site's own verifications where there are some, else those of its kind of advice and page
    kind; said so in its text."""
    program = _program(summary)
    for row in summary["rows"]:
        for item in row["advice"]:
            own = ratios.get((program, row["site"], item["kind"]))
            found = own or ratios.get((item["kind"], row["kind"]))
            if not found:
                continue
            ratio, count = found
            item["corrected_saving_ms"] = item["saving_ms"] / ratio
            item["correction"] = {"estimate_ratio": ratio, "verified_advice": count, "same_site": bool(own)}
            whose = (f"this site's verification{'s' if count > 1 else ''}" if own else
                     f"{count} earlier verification{'s' if count > 1 else ''} of {item['kind']} advice on "
                     f"{row['kind']} pages")
            item["text"] += (f" (corrected: ≈ {item['corrected_saving_ms']:,.1f} ms, as {whose} on this host measured "
                             f"{1 / ratio:.2f}× the estimate)")
