"""JSON export: the data itself, written as the results document is (results.document_text: the
samples one a line by json's C encoder; indenting them all with json's pure-Python encoder took
0.3 s and more of a traced `import torch`'s command)."""

from pathlib import Path

from ..results import document_text, write_atomically


def write(data: dict, path: Path) -> None:
    write_atomically(Path(path), document_text(data))
