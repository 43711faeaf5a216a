"""A flame graph as self-contained SVG: one box per frame, its width the share of the value (here
the estimated fault time) of the stacks that pass through it, roots at the bottom."""

from __future__ import annotations

from html import escape

WIDTH = 1100
ROW = 17
COLOURS = ["#e8743b", "#f2a04a", "#e0532e", "#f0b45e", "#d9623a"]


def _tree(stacks: list[tuple[list[str], float]]) -> dict:
    root: dict = {"name": "all", "value": 0.0, "children": {}}
    for frames, value in stacks:
        root["value"] += value
        node = root
        for frame in frames:
            node = node["children"].setdefault(frame, {"name": frame, "value": 0.0, "children": {}})
            node["value"] += value
    return root


def _depth(node: dict) -> int:
    return 1 + max((_depth(child) for child in node["children"].values()), default=0)


def svg(stacks: list[tuple[list[str], float]], title: str, unit: str) -> str:
    """`stacks`: (frames root first, value). Returns an <svg> element."""
    root = _tree([(frames, value) for frames, value in stacks if value > 0])
    if root["value"] <= 0:
        return ""
    height = (_depth(root) + 1) * ROW + 24
    boxes = []

    def place(node: dict, x: float, level: int) -> None:
        width = WIDTH * node["value"] / root["value"]
        if width < 0.5:
            return
        y = height - (level + 1) * ROW
        label = node["name"] if width > 40 else ""
        characters = int(width / 6.5)
        shown = label if len(label) <= characters else label[: max(characters - 2, 0)] + ".."
        tip = f"{node['name']}: {node['value']:,.1f} {unit} ({node['value'] / root['value']:.1%})"
        boxes.append(f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.5):.1f}" '
                     f'height="{ROW - 1}" rx="2" fill="{COLOURS[hash(node["name"]) % len(COLOURS)]}"/>'
                     f'<text x="{x + 3:.1f}" y="{y + ROW - 5}" font-size="11">{escape(shown)}</text></g>')
        offset = x
        for child in sorted(node["children"].values(), key=lambda c: c["name"]):
            place(child, offset, level + 1)
            offset += WIDTH * child["value"] / root["value"]

    place(root, 0.0, 0)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" '
            f'role="img"><text x="0" y="14" font-size="13" font-weight="bold">{escape(title)}</text>'
            + "".join(boxes) + "</svg>")
