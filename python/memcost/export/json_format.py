"""JSON export: the data itself."""

import json
from pathlib import Path

from ..results import write_atomically


def write(data: dict, path: Path) -> None:
    write_atomically(Path(path), json.dumps(data, indent=1) + "\n")
