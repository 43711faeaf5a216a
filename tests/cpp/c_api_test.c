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

  printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures);
  return failures == 0 ? 0 : 1;
}
