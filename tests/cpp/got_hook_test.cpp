// Pointing another library's calls elsewhere by its offset table (src/trace/preload/got_hook.c),
// as the preload library does with the extension modules' PyEval_SaveThread and RestoreThread.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>

extern "C" {
#include "trace/preload/got_hook.h"
int memcost_got_call_target(void);  // got_hook/caller.c, calling got_hook/target.c
}

namespace {

int replaced_calls = 0;
memcost_function real_target = nullptr;
int data_of_this_program = 0;  // "own": this program's slots are left alone

extern "C" int replacement(void) {
  ++replaced_calls;
  return 10 * reinterpret_cast<int (*)(void)>(real_target)();
}

TEST(GotHook, AnotherLibrarysCallsGoToTheReplacementWhichReachesTheReal) {
  ASSERT_EQ(memcost_got_call_target(), 1);  // bound (lazily or not) before the hook
  memcost_got_hook hook{"memcost_got_target", reinterpret_cast<memcost_function>(replacement), nullptr, {}};
  ASSERT_TRUE(memcost_got_hook_find(&hook));
  real_target = hook.real;
  EXPECT_GE(memcost_got_hook_apply(&hook, 1, &data_of_this_program), 1);
  EXPECT_EQ(memcost_got_call_target(), 10);
  EXPECT_EQ(replaced_calls, 1);
  EXPECT_EQ(memcost_got_hook_apply(&hook, 1, &data_of_this_program), 0);  // nothing loaded since: nothing to do
  EXPECT_EQ(memcost_got_call_target(), 10);
}

TEST(GotHook, AFunctionTheProcessLacksIsNotFound) {
  memcost_got_hook hook{"memcost_no_such_function", nullptr, nullptr, {}};
  EXPECT_FALSE(memcost_got_hook_find(&hook));
}

// A library loaded with RTLD_LOCAL (PyTorch's own libgomp) is out of dlsym(RTLD_DEFAULT)'s reach:
// its function is read from its own symbol table, and its soname kept.
TEST(GotHook, AFunctionIsFoundInTheLibraryThatDefinesItWithItsSoname) {
  memcost_got_hook hook{"memcost_got_target", nullptr, nullptr, {}};
  ASSERT_TRUE(memcost_got_hook_find_in(&hook, "libmemcost_got_target"));
  EXPECT_EQ(reinterpret_cast<void*>(hook.real), dlsym(RTLD_DEFAULT, "memcost_got_target"));
  EXPECT_STREQ(hook.needed, "libmemcost_got_target.so");
  memcost_got_hook caller{"memcost_got_target", nullptr, nullptr, {}};
  EXPECT_FALSE(memcost_got_hook_find_in(&caller, "libmemcost_got_caller"));  // it calls it, it does not define it
  EXPECT_FALSE(memcost_got_hook_find_in(&caller, "libno_such_library"));
}

// Hooked for one copy of a library, the objects that need another copy keep their own: a
// wheel's bundled libgomp is never mixed with PyTorch's.
TEST(GotHook, AHookForOneCopyOfALibraryLeavesTheObjectsThatNeedAnother) {
  ASSERT_EQ(memcost_got_call_target(), 1);
  memcost_got_hook hook{"memcost_got_target", reinterpret_cast<memcost_function>(replacement), nullptr, {}};
  ASSERT_TRUE(memcost_got_hook_find(&hook));
  real_target = hook.real;
  std::strcpy(hook.needed, "libanother_copy.so.1");
  EXPECT_EQ(memcost_got_hook_apply(&hook, 1, &data_of_this_program), 0);
  EXPECT_EQ(memcost_got_call_target(), 1);
  memcost_got_hook_forget();  // every object walked again, now for the copy the caller needs
  std::strcpy(hook.needed, "libmemcost_got_target.so");
  EXPECT_GE(memcost_got_hook_apply(&hook, 1, &data_of_this_program), 1);
  EXPECT_EQ(memcost_got_call_target(), 10);
}

// A slot is rewritten only once relocated: the real function, or (bound lazily) a stub inside its
// own object's code. An unrelocated one holds the file's own address, below the object's code.
TEST(GotHook, OnlyARelocatedSlotIsRewritten) {
  const std::uint64_t real = 0x7f0000001000, code_start = 0x7f1000000000, code_end = 0x7f1000100000;
  EXPECT_TRUE(memcost_got_slot_relocated(real, real, code_start, code_end));
  EXPECT_TRUE(memcost_got_slot_relocated(code_start + 0x36, real, code_start, code_end));
  EXPECT_FALSE(memcost_got_slot_relocated(0x1036, real, code_start, code_end));
  EXPECT_FALSE(memcost_got_slot_relocated(code_end, real, code_start, code_end));
  EXPECT_FALSE(memcost_got_slot_relocated(0, real, code_start, code_end));
}

}  // namespace
