"""Flat rows of a results document or a comparison, for CSV and Markdown."""

from __future__ import annotations


def _flatten(row: dict) -> dict:
    return {k: v for k, v in row.items() if not isinstance(v, (dict, list))}


def rows_of(data: dict) -> list[dict]:
    if "experiments" in data and "runs" in data:  # a comparison
        result = []
        for experiment, comparison in data["experiments"].items():
            for row in comparison["rows"]:
                flat = {"experiment": experiment, "measure": comparison["measure"],
                        **{k: row[k] for k in comparison["key"]}}
                for run, median in zip(data["runs"], row["medians"]):
                    flat[f"median {run}"] = median
                for run, versus in zip(data["runs"][1:], row["versus_first"]):
                    flat[f"ratio {run}"] = versus["ratio"]
                    flat[f"significant {run}"] = versus["significant"]
                result.append(flat)
        return result
    summary = data.get("summary", {})
    for key in ("rows", "cases"):
        if key in summary:
            return [_flatten(row) for row in summary[key]]
    return [_flatten(data.get("context", {}))]
