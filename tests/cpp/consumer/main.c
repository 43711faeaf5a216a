#include <memcost/memcost.h>
#include <stdio.h>

int main(void) {
  memcost_array* array = NULL;
  if (memcost_array_create_zeroed(1 << 20, sizeof(int), NULL, &array) != MEMCOST_OK) return 1;
  const int* values = (const int*)memcost_array_data(array);
  printf("%s %d\n", memcost_array_page_kind(array), values[12345]);
  int result = values[12345] == 0 ? 0 : 1;
  memcost_array_destroy(array);
  return result;
}
