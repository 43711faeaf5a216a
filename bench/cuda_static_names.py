#!/usr/bin/env python3
"""Which functions of a program built by nvcc does `memcost trace` take for the program's own?

nvcc links the CUDA runtime into the program by default (libcudart_static.a): its functions sit in
the program's own executable, so the module does not say they are a library's, and the trace's
frame rule (python/memcost/analysis/trace/frames.py, SYSTEM_FUNCTIONS) must know them by name.
This builds bench/data/cuda_pinning.cu with nvcc (no GPU needed), lists every function in the
executable (nm), and asks the rule about each. Every one must be the runtime's, C's start-up
code's, or one of the program's own functions; any other taken for the program's own would name
a site in the runtime instead of the program's line. Exit 1 when one is.

    python3 bench/cuda_static_names.py [--nvcc PATH]

nvcc: the one on PATH, else the PyPI wheel's (`pip install nvidia-cuda-nvcc`, which puts it in
site-packages/nvidia/cu*/bin with libcudart_static.a beside it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from memcost.analysis.trace import frames  # noqa: E402

SOURCE = ROOT / "bench" / "data" / "cuda_pinning.cu"
OWN = ("allocate_staging", "register_buffer", "copy_to_gpu", "check", "main")  # cuda_pinning.cu's functions
START_UP = {"_start", "_init", "_fini", "frame_dummy", "register_tm_clones", "deregister_tm_clones",
            "__do_global_dtors_aux", "atexit", "data_start"}  # C's start-up code, outside main


def find_nvcc(given: str | None) -> Path:
    if given:
        return Path(given)
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    wheels = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/cu*/bin/nvcc"))
    if not wheels:
        sys.exit("no nvcc: put it on PATH, pass --nvcc, or pip install nvidia-cuda-nvcc")
    return wheels[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", help="the nvcc to build with")
    nvcc = find_nvcc(parser.parse_args().nvcc)
    with tempfile.TemporaryDirectory(prefix="memcost-cuda-static-") as folder:
        program = Path(folder) / "cuda_pinning"
        # The wheel's nvcc finds its headers beside itself, and its runtime archive in ../lib.
        subprocess.run([str(nvcc), "-O2", "-g", "-o", str(program), str(SOURCE), f"-L{nvcc.parent.parent / 'lib'}"],
                       check=True)
        listing = subprocess.run(["nm", "-C", "--defined-only", str(program)], capture_output=True, text=True,
                                 check=True).stdout
    names = sorted({line.split(" ", 2)[2] for line in listing.splitlines()
                    if len(line.split(" ", 2)) == 3 and line.split(" ", 2)[1] in "tTwW"})
    taken = [name for name in names if frames.DEFAULT_FRAMES.is_users(
        {"kind": "native", "function": name, "file": "", "line": 0, "module": str(program), "address": 1})]
    own = [name for name in taken if any(f"{function}(" in name or name == function for function in OWN)]
    start_up = [name for name in taken if name in START_UP]
    wrong = [name for name in taken if name not in own and name not in start_up]
    print(f"{nvcc} built {SOURCE.name}: {len(names)} functions in the executable; taken for the program's own: "
          f"{len(own)} of its functions, {len(start_up)} of C's start-up code, {len(wrong)} others")
    for name in own:
        print(f"  own: {name}")
    for name in wrong:
        print(f"  WRONG (the runtime's, taken for the program's): {name}")
    return 1 if wrong or not own else 0


if __name__ == "__main__":
    sys.exit(main())
