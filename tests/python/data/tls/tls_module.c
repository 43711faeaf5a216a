/* One of many small shared libraries with thread-local storage in the default (dynamic) model,
   as plugin-loading programs (PyTorch's NVSHMEM, CUDA's libraries) load and unload them at run
   time. Built several times under different names by tests/python/e2e/test_preload_safety.py. */
__thread char memcost_tls_block[4096];
__thread long memcost_tls_counter;

long memcost_tls_touch(void) {
  memcost_tls_block[memcost_tls_counter % 4096] = 1;
  return ++memcost_tls_counter;
}
