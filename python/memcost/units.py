"""Sizes and durations as people write and read them."""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_SIZE_PATTERN = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([a-zA-Z]*)\s*$")
# Far beyond any machine's memory, and small enough to stay exact in every calculation.
LARGEST_SIZE = 1 << 60


def parse_size(text: str) -> int:
    """Bytes from "4096", "8M", "1.5GiB" (binary units: K = 1024). Zero is refused."""
    match = _SIZE_PATTERN.match(text)
    unit = match.group(2).lower() if match else ""
    shown = text if len(text) <= 40 else text[:37] + "..."
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"'{shown}' is not a size: write a number with an optional unit, e.g. 4096, 64K, 8M, 1G")
    scaled = float(match.group(1)) * _SIZE_UNITS[unit]
    if scaled > LARGEST_SIZE:
        raise ValueError(f"'{shown}' is far larger than any machine's memory")
    size = int(scaled)
    if size <= 0:
        raise ValueError(f"'{shown}' is not a usable size: it must be at least one byte")
    return size


def parse_size_list(text: str) -> list[int]:
    """Sizes separated by commas: "8M,32M,1G"."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError(f"'{text}' holds no sizes: write e.g. 8M,32M,1G")
    return [parse_size(part) for part in parts]


def format_bytes(size: float) -> str:
    """"8 MiB", "1.5 GiB", "512 B"."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(size) >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size:.0f} B"


def short_size(size: int) -> str:
    """The probe's own spelling: "8M", "1G", "264752"."""
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)
