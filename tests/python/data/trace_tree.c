/* Programs that fork, exec, crash and misbehave, for `memcost trace`. Every mode writes fresh
   anonymous memory on base pages (MADV_NOHUGEPAGE), so each MiB is 256 faults of its own.
     touch MIB            write MIB and exit 0
     fork CHILDREN MIB    write MIB, then fork CHILDREN that each write MIB of their own; wait for them
     crash MIB            write MIB, then die of SIGSEGV
     closed MIB           close stdout and stderr first, then write MIB
     noint MIB SECONDS [FILE]  ignore SIGINT, write MIB, create FILE, sleep, exit 0
     loop MIB [FILE]      write and free MIB over and over until killed; create FILE once running
     repeat MIB ROUNDS    write and free MIB, ROUNDS times
     service MIB MS [FILE]  a long-running service: write and free MIB every MS milliseconds until
                          killed; create FILE once running */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)

static void write_fresh(size_t mib) {
  const size_t size = mib * MIB;
  unsigned char *memory = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) exit(2);
  madvise(memory, size, MADV_NOHUGEPAGE);
  for (size_t offset = 0; offset < size; offset += 4096) memory[offset] = 1;
  munmap(memory, size);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *mode = argv[1];
  if (strcmp(mode, "touch") == 0) {
    write_fresh(strtoul(argv[2], NULL, 10));
  } else if (strcmp(mode, "fork") == 0 && argc > 3) {
    const int children = atoi(argv[2]);
    const size_t mib = strtoul(argv[3], NULL, 10);
    write_fresh(mib);
    for (int child = 0; child < children; ++child) {
      pid_t pid = fork();
      if (pid < 0) return 2;
      if (pid == 0) {
        write_fresh(mib);
        _exit(0);
      }
    }
    int status = 0;
    while (wait(&status) > 0) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
    }
  } else if (strcmp(mode, "crash") == 0) {
    write_fresh(strtoul(argv[2], NULL, 10));
    signal(SIGSEGV, SIG_DFL);
    volatile int *volatile nowhere = NULL; /* volatile: the compiler cannot prove the store away */
    *nowhere = 1;
  } else if (strcmp(mode, "closed") == 0) {
    close(1);
    close(2);
    write_fresh(strtoul(argv[2], NULL, 10));
  } else if (strcmp(mode, "noint") == 0 && argc > 3) {
    signal(SIGINT, SIG_IGN);
    write_fresh(strtoul(argv[2], NULL, 10));
    if (argc > 4) fclose(fopen(argv[4], "w"));
    sleep((unsigned)atoi(argv[3]));
  } else if (strcmp(mode, "repeat") == 0 && argc > 3) {
    const size_t mib = strtoul(argv[2], NULL, 10);
    for (int round = atoi(argv[3]); round > 0; --round) write_fresh(mib);
  } else if (strcmp(mode, "loop") == 0) {
    const size_t mib = strtoul(argv[2], NULL, 10);
    write_fresh(mib);
    if (argc > 3) fclose(fopen(argv[3], "w"));
    for (;;) write_fresh(mib);
  } else if (strcmp(mode, "service") == 0 && argc > 3) {
    const size_t mib = strtoul(argv[2], NULL, 10);
    const long ms = atol(argv[3]);
    if (argc > 4) fclose(fopen(argv[4], "w"));
    const struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    for (;;) {
      write_fresh(mib);
      nanosleep(&pause, NULL);
    }
  } else {
    return 2;
  }
  return 0;
}
