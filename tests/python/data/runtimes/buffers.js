// node with --perf-basic-prof: 30 buffers of 64 MiB made by a named function. memcost trace must
// name `allocateFrames` (the JavaScript function), not glibc's mmap or V8's internals.
'use strict';
function allocateFrames(count, bytes) {
  let sum = 0;
  for (let i = 0; i < count; i++) {
    const buffer = Buffer.alloc(bytes, i + 1);
    sum += buffer[bytes >> 1];
  }
  return sum;
}
console.log(allocateFrames(30, 64 << 20));
