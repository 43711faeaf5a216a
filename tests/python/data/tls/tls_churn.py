"""Loads, unloads and loads again many libraries with dynamic thread-local storage inside a CPython
process (where the preload library reads its own thread-local state on every small allocation),
touching their storage from threads started before and after them. Each touch from an older
thread makes the dynamic linker grow that thread's TLS table, calling malloc and free from inside
__tls_get_addr (glibc 2.39 on every access of a stale thread): an interposed malloc that reaches
__tls_get_addr itself recurses until the stack runs out. Usage: tls_churn.py DIR COUNT."""
import _ctypes
import ctypes
import sys
import threading

folder, count = sys.argv[1], int(sys.argv[2])
loaded, touched = threading.Barrier(2), threading.Barrier(2)
libraries = {}


def load(index):
    libraries[index] = ctypes.CDLL(f"{folder}/libtls{index}.so")


def touch_all():
    total = 0
    for library in list(libraries.values()):
        blocks = [bytearray(1 << 20), bytes(64)]  # big and small allocations between the touches
        total += library.memcost_tls_touch()
        del blocks
    return total


def older():
    bytearray(100)
    loaded.wait()
    results["older"] = touch_all()
    touched.wait()


results = {}
thread = threading.Thread(target=older)
thread.start()
for index in range(count):
    load(index)
touch_all()
for index in range(0, count, 2):  # their module slots freed for reuse
    _ctypes.dlclose(libraries.pop(index)._handle)
for index in range(0, count, 2):
    load(index)
loaded.wait()
touched.wait()
newer = threading.Thread(target=lambda: results.__setitem__("newer", touch_all()))
newer.start()
newer.join()
thread.join()
print("ok", results["older"], results["newer"])
