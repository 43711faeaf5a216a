/* The C API round trip, from C: create, check, destroy; and the errors. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "memcost/memcost.h"

static int failures = 0;
#define CHECK(condition)                                              \
  do {                                                                \
    if (!(condition)) {                                               \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

int main(void) {
  memcost_options options;
  memcost_options_init(&options);
  CHECK(options.pages == MEMCOST_PAGES_AUTO && options.prefault == MEMCOST_PREFAULT_NOW);

  const size_t count = (8u << 20) / sizeof(double) + 5;
  memcost_array* zeros = NULL;
  CHECK(memcost_array_create_zeroed(count, sizeof(double), &options, &zeros) == MEMCOST_OK);
  if (zeros) {
    const double* values = (const double*)memcost_array_data(zeros);
    CHECK(memcost_array_count(zeros) == count);
    CHECK(values[0] == 0.0 && values[count - 1] == 0.0);
    CHECK(memcost_array_ready(zeros, count - 1));
    CHECK(strlen(memcost_array_page_kind(zeros)) > 0);
    memcost_array_destroy(zeros);
  }

  struct pair { uint32_t a, b; } value = {7, 9};
  memcost_array* filled = NULL;
  options.prefault = MEMCOST_PREFAULT_ASYNC;
  options.threads = 2;
  CHECK(memcost_array_create_filled(count, sizeof value, &value, &options, &filled) == MEMCOST_OK);
  if (filled) {
    memcost_array_wait(filled);
    const struct pair* pairs = (const struct pair*)memcost_array_data(filled);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += pairs[i].a != 7 || pairs[i].b != 9;
    CHECK(wrong == 0);
    CHECK(memcost_array_ready(filled, 0) && !memcost_array_ready(filled, count));
    memcost_array_destroy(filled);
  }

  memcost_array* bad = (memcost_array*)&value;
  CHECK(memcost_array_create_zeroed(SIZE_MAX / 2, 8, NULL, &bad) == MEMCOST_ERROR_BAD_SIZE);
  CHECK(bad == NULL);
  CHECK(strstr(memcost_last_error(), "overflow") != NULL);
  CHECK(memcost_array_create_zeroed(0, 8, NULL, &bad) == MEMCOST_ERROR_BAD_SIZE);
  CHECK(memcost_array_create_zeroed((size_t)1 << 50, 1, NULL, &bad) == MEMCOST_ERROR_OUT_OF_MEMORY);
  CHECK(memcost_array_create_zeroed(10, 8, NULL, NULL) == MEMCOST_ERROR_BAD_ARGUMENT);
  CHECK(memcost_array_create_filled(10, 8, NULL, NULL, &bad) == MEMCOST_ERROR_BAD_ARGUMENT);
  options.pages = (memcost_pages)42;
  CHECK(memcost_array_create_zeroed(10, 8, &options, &bad) == MEMCOST_ERROR_BAD_ARGUMENT);

  /* A pool: the second array of a size comes from it, zeroed again, and goes back on destroy. */
  memcost_pool* pool = memcost_pool_create((size_t)64 << 20);
  CHECK(pool != NULL);
  if (pool) {
    memcost_options pooled;
    memcost_options_init(&pooled);
    pooled.pool = pool;
    uint32_t sevens = 0x07070707u;
    memcost_array* first = NULL;
    CHECK(memcost_array_create_filled(count, sizeof sevens, &sevens, &pooled, &first) == MEMCOST_OK);
    memcost_array_destroy(first);
    CHECK(memcost_pool_get_stats(pool).bytes_held >= count * sizeof sevens);
    memcost_array* second = NULL;
    CHECK(memcost_array_create_zeroed(count, sizeof sevens, &pooled, &second) == MEMCOST_OK);
    if (second) {
      const uint32_t* words = (const uint32_t*)memcost_array_data(second);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += words[i] != 0;
      CHECK(wrong == 0);
      memcost_array_destroy(second);
    }
    memcost_pool_stats stats = memcost_pool_get_stats(pool);
    CHECK(stats.hits == 1 && stats.misses == 1 && stats.pieces_held == 1);
    memcost_pool_trim(pool, 0);
    CHECK(memcost_pool_get_stats(pool).bytes_held == 0);
    memcost_pool_destroy(pool);
  }

  /* A NUMA placement reads back; an unknown one is refused. */
  memcost_options placed;
  memcost_options_init(&placed);
  placed.numa = MEMCOST_NUMA_NODE;
  placed.numa_node = 0;
  memcost_array* on_node = NULL;
  memcost_status placed_status = memcost_array_create_zeroed(count, 4, &placed, &on_node);
  CHECK(placed_status == MEMCOST_OK || placed_status == MEMCOST_ERROR_NOT_SUPPORTED);
  if (on_node) {
    CHECK(strcmp(memcost_array_numa_policy(on_node), "bind:0") == 0);
    memcost_array_destroy(on_node);
  }
  placed.numa = (memcost_numa)9;
  CHECK(memcost_array_create_zeroed(count, 4, &placed, &bad) == MEMCOST_ERROR_BAD_ARGUMENT);

  printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures);
  return failures == 0 ? 0 : 1;
}
