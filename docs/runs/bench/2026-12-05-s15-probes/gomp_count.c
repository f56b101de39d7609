// Counts GOMP_parallel calls (every OpenMP parallel region, oneDNN's
// included) of a process: LD_PRELOAD=./gomp_count.so <program>; the count at exit.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long calls;
static void report(void) { fprintf(stderr, "GOMP_parallel calls: %lu\n", calls); }
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  static void (*real)(void (*)(void*), void*, unsigned, unsigned);
  if (!real) { real = dlsym(RTLD_NEXT, "GOMP_parallel"); atexit(report); }
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  real(fn, data, num_threads, flags);
}
