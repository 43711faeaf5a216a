/* Loads the library its first argument names and calls its make_big(): a program whose own code
   lives in a library at a path of the test's choosing (test_trace.py: a path that is not UTF-8). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  void *library = dlopen(argv[1], RTLD_NOW);
  void (*make_big)(void) = library ? (void (*)(void))dlsym(library, "make_big") : NULL;
  if (!make_big) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  make_big();
  return 0;
}
