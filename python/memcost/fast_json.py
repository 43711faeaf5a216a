"""JSON for the probe's records and the results' samples, where the volume is: a trace of `import
torch` is 30 MB of stacks, which json's C decoder and encoder took 0.6 s of the command's time to
read and write again (2-vCPU machine). orjson does it in a fraction of that; where it is not
installed (a host with no package registry, running memcost from python/), json does the same job.
Both read the same values: what orjson refuses (NaN, integers over 64 bits) json reads."""

from __future__ import annotations

import json

try:
    import orjson
except ImportError:  # the standard library's, slower
    orjson = None


def loads(text: str | bytes):
    """json.loads, by orjson where it can."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # json's own reading, and its error where the text is not JSON
    return json.loads(text)


def dumps(value) -> str:
    """One line of JSON (json.dumps without indenting), by orjson where it can."""
    if orjson is not None:
        try:
            return orjson.dumps(value).decode()
        except TypeError:
            pass  # keys that are not strings, integers over 64 bits: json writes them
    return json.dumps(value)
