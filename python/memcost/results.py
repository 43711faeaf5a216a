"""Results documents and the results directory (DESIGN.md, "Results")."""

from __future__ import annotations

import itertools
import json
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Optional

from . import __version__
from .errors import MemcostError

SCHEMA_VERSION = 1
DEFAULT_ROOT = Path("results")
LATEST = "latest"


class ResultsError(MemcostError):
    """A results document or directory that cannot be used; the message says why."""


def wine_label(context: dict) -> str:
    """"Wine 8.0 on Linux 6.18.44" for figures measured by the Windows probe under Wine, else ""."""
    wine = context.get("wine")
    if not isinstance(wine, dict):
        return ""
    host = " ".join(part for part in (wine.get("host_system"), wine.get("host_release")) if part)
    return f"Wine {wine.get('version', '')} on {host or 'an unknown host'}".replace("  ", " ")


def machine_label(context: dict) -> str:
    """The host as every table, figure and comparison names it: with "(Wine … on Linux …)" when the
    figures were measured under Wine, since they then describe Wine, not Windows."""
    host = context.get("host", "") or "host"
    wine = wine_label(context)
    return f"{host} ({wine})" if wine else host


def as_text(value):
    """`value` as a results document holds it: a string with bytes that were not UTF-8 (Python reads
    them from argv and paths as lone surrogates, which JSON writes as escapes no reader can print)
    with U+FFFD in their place, as the probe writes a traced program's bytes; in lists and dicts too."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate no decoding of bytes made
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, (list, tuple)):
        return [as_text(item) for item in value]
    if isinstance(value, dict):
        return {key: as_text(item) for key, item in value.items()}
    return value


def make_document(experiment: str, context: dict, params: dict, samples: list,
                  summary: dict, warnings: list) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "experiment": experiment,
        "context": context,
        "params": as_text(params),
        "samples": samples,
        "summary": summary,
        "warnings": warnings,
    }


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: readers never see half a file."""
    import tempfile  # here: with the shutil, random and compression modules it loads, 4 ms of every command's start
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb" if isinstance(text, bytes) else "w") as out:
            out.write(text)
        # mkstemp makes the file private; results are ordinary files.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class RunDirectory:
    """results/<UTC time>-<host>/, named after the host of the first document
    written and created only then, so that a run that stores nothing leaves
    nothing behind. Claimed by creating it: a run that finds the name taken (another
    started in the same second on the same host) takes <UTC time>-<host>-2 (-3, …)
    instead of writing over the other's results."""

    def __init__(self, root: Path, now: Optional[datetime] = None):
        self.root = Path(root)
        self.stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        self.path: Optional[Path] = None

    def directory_for(self, host: str) -> Path:
        if self.path is None:
            safe_host = "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "host"
            self.root.mkdir(parents=True, exist_ok=True)
            for number in itertools.count(1):
                candidate = self.root / (f"{self.stamp}-{safe_host}" + (f"-{number}" if number > 1 else ""))
                try:
                    candidate.mkdir()
                except FileExistsError:
                    continue
                self.path = candidate
                break
        return self.path

    def write(self, document: dict) -> Path:
        target = self.directory_for(document["context"].get("host", "")) / f"{document['experiment']}.json"
        write_atomically(target, document_text(document))
        self._point_latest_here()
        return target

    def _point_latest_here(self) -> None:
        latest = self.root / LATEST
        temporary = self.root / f".{LATEST}.{os.getpid()}.tmp"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(self.path.name)
        os.replace(temporary, latest)


_SAMPLES_HERE = "\x00memcost samples\x00"


def document_text(document: dict) -> str:
    """A results document as JSON text: its raw samples one a line, by json's C encoder, the rest
    indented. (The indenting encoder is json's pure-Python one: a trace of `import torch` holds
    millions of values in its stacks, and writing it indented took seconds of the command's time.)"""
    if not isinstance(document.get("samples"), list):
        return json.dumps(document, indent=1) + "\n"
    text = json.dumps({**document, "samples": _SAMPLES_HERE}, indent=1)
    # A sample as the probe wrote it keeps its text (probe.ProbeSample): not encoded again.
    samples = ",\n".join("  " + (getattr(sample, "text", None) or json.dumps(sample)) for sample in document["samples"])
    return text.replace(json.dumps(_SAMPLES_HERE), f"[\n{samples}\n ]" if samples else "[]", 1) + "\n"


def documents_of_host(root: Path, experiment: str, host: str) -> Iterator[tuple[Path, dict]]:
    """This host's results documents of one experiment under `root`, newest first (unreadable
    ones skipped): where a command looks for this machine's measured costs."""
    for path in sorted(Path(root).glob(f"*/{experiment}.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and isinstance(document.get("context"), dict) \
                and document["context"].get("host") == host:
            yield path, document


def load_document(path: Path) -> dict:
    """A results document, checked for the fields every reader relies on and their types."""
    path = Path(path)
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as error:
        raise ResultsError(f"{path}: no such results file") from error
    except IsADirectoryError as error:
        raise ResultsError(f"{path}: a folder, not a results file") from error
    except OSError as error:
        raise ResultsError(f"{path}: cannot be read ({error.strerror})") from error
    except UnicodeDecodeError as error:
        raise ResultsError(f"{path}: not a JSON document (not text)") from error
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not a JSON document ({error.msg} at line {error.lineno})") from error
    if not isinstance(document, dict):
        raise ResultsError(f"{path}: not a memcost results document (a JSON {type(document).__name__}, not an object)")
    missing = [key for key in ("schema_version", "experiment", "context", "samples", "summary") if key not in document]
    if missing:
        raise ResultsError(f"{path}: not a memcost results document (missing {', '.join(missing)})")
    if document["schema_version"] != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema version {document['schema_version']!r}, but this memcost reads version "
                           f"{SCHEMA_VERSION}: rerun the experiment with this version")
    expected = {"experiment": str, "context": dict, "samples": list, "summary": dict, "warnings": list}
    wrong = [key for key, kind in expected.items() if key in document and not isinstance(document[key], kind)]
    if not wrong and any(not isinstance(sample, dict) or not isinstance(sample.get("case"), dict)
                         or not isinstance(sample.get("metrics"), dict) for sample in document["samples"]):
        wrong.append("samples")
    if wrong:
        raise ResultsError(f"{path}: not a memcost results document ({', '.join(dict.fromkeys(wrong))} of the wrong type)")
    return document


@contextmanager
def reading(what: str):
    """Around code that reads deep into loaded documents: a document that passed load_document's
    checks but still holds something unexpected ends in one line, not a traceback."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise ResultsError(f"{what} holds a results document this memcost cannot read "
                           f"({type(error).__name__}: {error}); rerun the experiment with this version") from error
