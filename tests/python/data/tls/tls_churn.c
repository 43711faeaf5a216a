/* Loads, unloads and loads again many libraries with dynamic thread-local storage, and touches
   their storage from threads started before and after them, allocating all the while. Each touch
   from an older thread makes the dynamic linker grow that thread's TLS table (glibc >= 2.39 also
   frees and allocates on slot reuse after dlclose), calling malloc and free from inside
   __tls_get_addr: an interposed malloc that reaches __tls_get_addr itself recurses until the stack
   runs out. Usage: tls_churn DIR COUNT (DIR holds libtls0.so .. libtls{COUNT-1}.so). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long (*touch_fn)(void);
static const char *folder;
static int count;
static void *handles[256];
static pthread_barrier_t loaded, touched;

static void load(int first, int last) {
  for (int i = first; i < last; ++i) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/libtls%d.so", folder, i);
    handles[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handles[i]) {
      fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
      exit(2);
    }
  }
}

static long touch_all(void) {
  long sum = 0;
  for (int i = 0; i < count; ++i) {
    if (!handles[i]) continue;
    touch_fn touch = (touch_fn)dlsym(handles[i], "memcost_tls_touch");
    void *big = malloc(1 << 20); /* big and small calls between the touches */
    void *small = malloc(64);
    sum += touch();
    free(small);
    free(big);
  }
  return sum;
}

static void *older_thread(void *unused) {
  (void)unused;
  free(malloc(100));                /* this thread's TLS table is made before the libraries come */
  pthread_barrier_wait(&loaded);    /* they are loaded, unloaded and loaded again meanwhile */
  long sum = touch_all();
  pthread_barrier_wait(&touched);
  return (void *)sum;
}

static void *newer_thread(void *unused) {
  (void)unused;
  return (void *)touch_all();
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  folder = argv[1];
  count = atoi(argv[2]);
  if (count < 2 || count > 256) return 2;
  pthread_barrier_init(&loaded, NULL, 2);
  pthread_barrier_init(&touched, NULL, 2);
  pthread_t older, newer;
  pthread_create(&older, NULL, older_thread, NULL);
  load(0, count);
  touch_all();
  for (int i = 0; i < count; i += 2) dlclose(handles[i]), handles[i] = NULL; /* slots freed for reuse */
  load(0, 1);
  for (int i = 2; i < count; i += 2) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/libtls%d.so", folder, i);
    handles[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  pthread_barrier_wait(&loaded);
  pthread_barrier_wait(&touched);
  pthread_create(&newer, NULL, newer_thread, NULL);
  void *a, *b;
  pthread_join(older, &a);
  pthread_join(newer, &b);
  printf("ok %ld %ld\n", (long)a, (long)b);
  return 0;
}
