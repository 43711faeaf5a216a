/* The contract: block_table.h. */
#include "trace/preload/block_table.h"

#include <pthread.h>
#include <stdint.h>

enum { SLOTS = MEMCOST_BLOCK_TABLE_SLOTS };
enum { EMPTY = 0, TOMBSTONE = 1 };

static uintptr_t table[SLOTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(uintptr_t key) { return (key >> 4) * 0x9E3779B97F4A7C15ULL >> 48; }

void memcost_block_remember(void *pointer) {
  pthread_mutex_lock(&table_lock);
  for (size_t i = slot_of((uintptr_t)pointer), n = 0; n < SLOTS; i = (i + 1) % SLOTS, ++n) {
    if (table[i] == EMPTY || table[i] == TOMBSTONE) {
      table[i] = (uintptr_t)pointer;
      break;
    }
  }
  pthread_mutex_unlock(&table_lock);
}

/* A block forgotten leaves a tombstone, which keeps the probe chains through its slot. Where the
   next slot is empty no chain goes on past it: the slot and the tombstones just before it are
   emptied instead. Left, tombstones fill the table as blocks come and go (a long PyTorch run makes
   more big blocks than it has slots), and every free of a small block, which finds nothing, walks
   them all under the lock. */
int memcost_block_forget(void *pointer) {
  int found = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = slot_of((uintptr_t)pointer), n = 0; n < SLOTS && table[i] != EMPTY; i = (i + 1) % SLOTS, ++n) {
    if (table[i] != (uintptr_t)pointer) continue;
    found = 1;
    if (table[(i + 1) % SLOTS] != EMPTY) {
      table[i] = TOMBSTONE;
      break;
    }
    size_t j = i;
    do {
      table[j] = EMPTY;
      j = (j + SLOTS - 1) % SLOTS;
    } while (table[j] == TOMBSTONE && j != i);
    break;
  }
  pthread_mutex_unlock(&table_lock);
  return found;
}

size_t memcost_block_slots_used(void) {
  size_t used = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < SLOTS; ++i) used += table[i] != EMPTY;
  pthread_mutex_unlock(&table_lock);
  return used;
}
