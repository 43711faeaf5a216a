# The numpy script of `memcost trace --verify`: 120 arrays of a little over 5 MiB, written and kept.
# numpy asks for huge pages on each array's 2 MiB-aligned inside; the unaligned ends of its blocks
# (glibc's start just after a header) fault on base pages: the trace advises aligning them.
import numpy as np

arrays = []
for i in range(120):
    array = np.empty(5 * 1024 * 1024 // 8 + 1000)
    array[:] = i
    arrays.append(array)
print(int(sum(array[::4096].sum() for array in arrays)))
