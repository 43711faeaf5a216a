"""argparse value types shared by the subcommands; a bad value exits 2 with one line."""

from __future__ import annotations

import argparse
import re
import math
import os
from pathlib import Path
from typing import Callable

from .units import parse_size, parse_size_list


def size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def size_or_zero(text: str) -> int:
    """A size, or 0 where zero means "none" (bigarray --serial-part 0)."""
    return 0 if text.strip() == "0" else size(text)


def size_list(text: str) -> list[int]:
    try:
        return parse_size_list(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


# No count memcost takes (repetitions, threads, frames, processes shown) is sensibly above this.
LARGEST_COUNT = 100_000_000


def _whole_number(text: str, minimum: int, wording: str) -> int:
    shown = text if len(text) <= 40 else text[:37] + "..."
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"'{shown}' is not a whole number") from error
    if value < minimum:
        raise argparse.ArgumentTypeError(f"'{shown}' must be {wording}")
    if value > LARGEST_COUNT:
        raise argparse.ArgumentTypeError(f"'{shown}' is far too large (at most {LARGEST_COUNT:,})")
    return value


def bounded_seconds(minimum: float, maximum: float, *, allow_minimum: bool = True) -> Callable[[str], float]:
    """A finite number of seconds in [minimum, maximum] (or (minimum, maximum])."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from error
        low_ok = value >= minimum if allow_minimum else value > minimum
        if not math.isfinite(value) or not low_ok or value > maximum:
            low = f"at least {minimum:g}" if allow_minimum else f"more than {minimum:g}"
            raise argparse.ArgumentTypeError(f"'{text}' must be {low} and at most {maximum:g} seconds")
        return value
    return parse


DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def bounded_duration(minimum: float, maximum: float) -> Callable[[str], float]:
    """A duration in seconds, as `90`, `90s`, `1.5m`, `2h` or `500ms`, in [minimum, maximum]."""
    def parse(text: str) -> float:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|min|m|h)?\s*", text)
        if not match:
            raise argparse.ArgumentTypeError(f"'{text}' is not a duration: give e.g. 60s, 5m or 1h")
        value = float(match.group(1)) * DURATION_UNITS[match.group(2) or "s"]
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"'{text}' must be at least {minimum:g} and at most {maximum:g} seconds")
        return value
    return parse


def _first_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_writable_below(path: Path, text: str) -> None:
    """The deepest existing folder on the way to `path` must be a folder we may write in."""
    existing = _first_existing(path.parent if not path.exists() else path)
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}': {existing} is a file, not a folder; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"'{text}': {existing} is not writable; choose another path")


def output_file(text: str) -> Path:
    """A file memcost will (re)write: a regular file or a new name, in a folder it can write in."""
    path = Path(text).expanduser().absolute()
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a file")
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise argparse.ArgumentTypeError(f"'{text}' is {kind}; name a file to write")
    _check_writable_below(path.parent, text)
    return Path(text).expanduser()


def output_path(text: str) -> Path:
    """A file or a folder memcost will write (which one, the command decides), where it can write."""
    path = Path(text).expanduser().absolute()
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a file or folder")
    if path.exists() and not path.is_file() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is not a regular file or folder; name one to write")
    _check_writable_below(path if path.is_dir() else path.parent, text)
    return Path(text).expanduser()


def output_folder(text: str) -> Path:
    """A folder memcost will create (if needed) and write in."""
    path = Path(text).expanduser().absolute()
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a folder")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is not a folder; name a folder to write results in")
    _check_writable_below(path, text)
    return Path(text).expanduser()


def regex(text: str) -> str:
    """A Python regular expression, checked now rather than where it is used."""
    try:
        re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"'{text}' is not a regular expression ({error})")
    return text


def positive_int(text: str) -> int:
    return _whole_number(text, 1, "at least 1")


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0, "0 or more")


def choice_list(choices: list[str]) -> Callable[[str], list[str]]:
    """Comma-separated names, each one of `choices`."""
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"'{text}': choose from {', '.join(choices)}")
        return items
    return parse


def name_parts(text: str) -> list[str]:
    """Comma-separated parts of names to match, at least one."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"'{text}' names nothing: give one or more parts of names, comma-separated")
    return items
