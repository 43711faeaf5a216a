// Pinning for a GPU (memcost/pinned.hpp) without one: the chunking, the registration and its
// release through a stand-in driver (fake_cuda.c, named by MEMCOST_CUDA_LIBRARY), and the errors
// where there is no driver or no GPU. ctest runs each suite with its driver (tests/cpp/CMakeLists.txt);
// PinnedOnThisMachine uses the real one, and skips with the reason where there is none.
#include "memcost/pinned.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "big_array/cuda_driver.hpp"
#include "memcost/allocator.hpp"
#include "memcost/big_array.hpp"
#include "memcost/memcost.h"

namespace memcost {
namespace {

constexpr std::size_t GiB = std::size_t{1} << 30;

TEST(RegistrationChunks, AtMost64GiBEachWholePagesButTheLastAndTheyCoverEverything) {
  EXPECT_TRUE(registration_chunks(0).empty());
  const auto one = registration_chunks(32 * GiB);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].bytes, 32 * GiB);
  const auto exact = registration_chunks(128 * GiB);
  ASSERT_EQ(exact.size(), 2U);
  EXPECT_EQ(exact[1].offset, 64 * GiB);
  // 600 GiB, more than one registration the driver takes (512 GiB): ten chunks, the last 24 GiB.
  const auto big = registration_chunks(600 * GiB + 12345);
  ASSERT_EQ(big.size(), 10U);
  std::size_t covered = 0;
  for (const registration_chunk& chunk : big) {
    EXPECT_EQ(chunk.offset, covered);
    EXPECT_LE(chunk.bytes, max_registration_bytes);
    covered += chunk.bytes;
  }
  EXPECT_EQ(covered, 600 * GiB + 12345);
  // A limit that is not whole pages is rounded down to them.
  const auto odd = registration_chunks(10 * 4096, 3 * 4096 + 100);
  ASSERT_EQ(odd.size(), 4U);
  EXPECT_EQ(odd[0].bytes, 3U * 4096);
  EXPECT_EQ(odd[3].bytes, 4096U);
}

// The stand-in driver's record of what was registered.
struct FakeDriver {
  const bool loaded = pinning_unavailable().empty();  // memcost loads the driver first
  void* library = dlopen(std::getenv("MEMCOST_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  template <class F>
  F call(const char* name) const {
    return reinterpret_cast<F>(dlsym(library, name));
  }
  int live() const { return call<int (*)()>("fake_cuda_live")(); }
  int registrations() const { return call<int (*)()>("fake_cuda_registrations")(); }
  std::size_t bytes(int i) const { return call<std::size_t (*)(int)>("fake_cuda_bytes")(i); }
  void* start(int i) const { return call<void* (*)(int)>("fake_cuda_start")(i); }
  unsigned flags(int i) const { return call<unsigned (*)(int)>("fake_cuda_flags")(i); }
  std::size_t resident_at_call(int i) const { return call<std::size_t (*)(int)>("fake_cuda_resident_at_call")(i); }
};

TEST(PinnedWithADriver, AnArrayIsRegisteredWholeAndUnregisteredBeforeItGoes) {
  ASSERT_EQ(pinning_unavailable(), "") << "the stand-in driver loads";
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  const int before = driver.registrations();
  {
    auto array = make_big_array<float>(4 << 20, zero, {.pages = pages::base, .prefault = prefault::async, .pinned = true});
    EXPECT_TRUE(array.report().pinned);
    EXPECT_TRUE(array.ready(array.size() - 1)) << "pinned: made at once, whatever prefault says";
    ASSERT_EQ(driver.registrations(), before + 1);
    EXPECT_EQ(driver.start(before), array.data());
    EXPECT_EQ(driver.bytes(before), array.report().mapped_bytes);
    EXPECT_EQ(driver.flags(before), 1U) << "portable: pinned for every context";
    EXPECT_EQ(driver.live(), 1);
    auto moved = std::move(array);
    EXPECT_EQ(driver.live(), 1) << "moving the array moves its registration";
  }
  EXPECT_EQ(driver.live(), 0) << "unregistered when the array went";
}

// The registration is asked for while the threads fault the memory in, not after: the driver's
// walk follows the faulting threads (256 MiB of base pages: far longer to fault in than to start).
TEST(PinnedWithADriver, AnArrayIsRegisteredWhileItsPagesAreFaultedIn) {
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  const int before = driver.registrations();
  auto array = make_big_array<char>(std::size_t{256} << 20, zero, {.pages = pages::base, .threads = 2, .pinned = true});
  ASSERT_EQ(driver.registrations(), before + 1);
  const std::size_t pages = array.report().mapped_bytes / 4096;
  EXPECT_LT(driver.resident_at_call(before), pages) << "the driver was called before every page was in";
  EXPECT_TRUE(array.ready(array.size() - 1));
  EXPECT_EQ(array[array.size() - 1], 0);
  EXPECT_EQ(driver.live(), 1);
}

// pin_chunk_bytes: one registration per chunk, side by side, each made by the thread that
// initialized it; every element written once, those straddling a border too; all let go after.
struct Triple {
  std::uint32_t a, b, c;
};
TEST(PinnedWithADriver, AnArrayPinnedInChunksIsRegisteredChunkByChunkAndFullyInitialized) {
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  const int before = driver.registrations();
  {
    auto zeros = make_big_array<char>(std::size_t{64} << 20, zero,
                                      {.pages = pages::base, .threads = 2, .pinned = true, .pin_chunk_bytes = 16 << 20});
    EXPECT_EQ(zeros.report().pinned_chunks, 4U);
    ASSERT_EQ(driver.registrations(), before + 4);
    std::vector<std::pair<void*, std::size_t>> made;
    for (int i = before; i < before + 4; ++i) made.emplace_back(driver.start(i), driver.bytes(i));
    std::sort(made.begin(), made.end());
    for (std::size_t i = 0; i < made.size(); ++i) {
      EXPECT_EQ(made[i].first, zeros.data() + i * (16 << 20));
      EXPECT_EQ(made[i].second, std::size_t{16} << 20);
    }
    EXPECT_TRUE(zeros.ready(zeros.size() - 1));
    EXPECT_EQ(zeros[zeros.size() - 1], 0);
    // 12-byte elements: a 4 MiB chunk border falls inside one of them.
    const std::size_t n = (std::size_t{10} << 20) / sizeof(Triple);
    auto triples = make_big_array<Triple>(n, fill(Triple{1, 2, 3}),
                                          {.pages = pages::base, .threads = 2, .pinned = true, .pin_chunk_bytes = 4 << 20});
    EXPECT_EQ(triples.report().pinned_chunks, 3U);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += triples[i].a != 1 || triples[i].b != 2 || triples[i].c != 3;
    EXPECT_EQ(wrong, 0U);
    EXPECT_EQ(driver.live(), 7);
  }
  EXPECT_EQ(driver.live(), 0) << "every chunk unregistered when its array went";
}

// A pool keeps a pinned array's memory registered: the next pinned array takes it with no driver
// call; an unpinned one gets it unpinned; trimming unpins before it unmaps.
TEST(PinnedWithADriver, APoolKeepsTheMemoryPinnedForTheNextPinnedArray) {
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  const int before = driver.registrations();
  array_pool pool(64 << 20);
  const big_array_options pinned{.pages = pages::base, .pool = &pool, .pinned = true};
  { auto first = make_big_array<float>(1 << 20, zero, pinned); }
  EXPECT_EQ(driver.live(), 1) << "held by the pool, still registered";
  EXPECT_EQ(pool.stats().pieces_pinned, 1U);
  {
    auto second = make_big_array<float>(1 << 20, zero, pinned);
    EXPECT_TRUE(second.report().from_pool);
    EXPECT_TRUE(second.report().pinned);
    EXPECT_EQ(second.report().pin_seconds, 0.0);
    EXPECT_EQ(driver.registrations(), before + 1) << "no second registration";
    EXPECT_EQ(pool.stats().pinned_hits, 1U);
    EXPECT_EQ(second[12345], 0.0F) << "zeroed again, as pooled memory is";
  }
  {
    auto unpinned = make_big_array<float>(1 << 20, zero, {.pages = pages::base, .pool = &pool});
    EXPECT_TRUE(unpinned.report().from_pool);
    EXPECT_FALSE(unpinned.report().pinned);
    EXPECT_EQ(driver.live(), 0) << "an unpinned array gets its memory unpinned";
  }
  { auto third = make_big_array<float>(1 << 20, zero, pinned); }  // pinned afresh, pooled registered
  EXPECT_EQ(driver.live(), 1);
  pool.release();
  EXPECT_EQ(driver.live(), 0) << "unpinned when the pool lets the memory go";
  EXPECT_EQ(pool.stats().pieces_pinned, 0U);
  {
    array_pool small(1 << 20);  // too small to hold the array: the memory goes at once, unpinned
    { auto big = make_big_array<float>(1 << 20, zero, {.pages = pages::base, .pool = &small, .pinned = true}); }
    EXPECT_EQ(driver.live(), 0);
  }
}

TEST(PinnedWithADriver, MemoryOfYourOwnAndTheDriversRefusalInOneSentence) {
  std::vector<char> memory(1 << 20);
  FakeDriver driver;
  {
    pinned_registration pinned(memory.data(), memory.size());
    EXPECT_TRUE(pinned.pinned());
    EXPECT_EQ(pinned.chunks(), 1U);
    EXPECT_EQ(driver.live(), 1);
  }
  EXPECT_EQ(driver.live(), 0);
  setenv("FAKE_CUDA_MAX_BYTES", "4096", 1);
  try {
    auto array = make_big_array<float>(1 << 20, zero, {.pinned = true});
    ADD_FAILURE() << "the driver refused, and the array was made anyway";
  } catch (const pinning_error& error) {
    EXPECT_NE(std::string(error.what()).find("the CUDA driver would not pin"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("invalid argument"), std::string::npos) << "the driver's own words";
  }
  unsetenv("FAKE_CUDA_MAX_BYTES");
  EXPECT_EQ(driver.live(), 0) << "nothing left registered";
}

// A plan of chunks registered by several threads: every chunk once, each unregistered, and the
// caller told of each as it goes (to unmap it there).
TEST(PinnedWithADriver, ChunksRegisteredByThreadsAreEachUnregisteredAndHandedBack) {
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  constexpr std::size_t chunk = 64 << 10, bytes = 37 * chunk + 4096;
  std::vector<char> memory(bytes);
  const int before = driver.registrations();
  std::vector<std::size_t> handed_back;
  std::mutex handing;
  {
    pinned_registration pinned(memory.data(), bytes, {.chunk_bytes = chunk, .threads = 4});
    EXPECT_EQ(pinned.chunks(), 38U);
    EXPECT_EQ(driver.live(), 38);
    ASSERT_EQ(driver.registrations(), before + 38);
    std::vector<std::pair<char*, std::size_t>> made;
    for (int i = before; i < driver.registrations(); ++i) made.emplace_back(static_cast<char*>(driver.start(i)), driver.bytes(i));
    std::sort(made.begin(), made.end());
    std::size_t covered = 0;
    for (const auto& [start, length] : made) {
      EXPECT_EQ(start, memory.data() + covered) << "side by side, none twice";
      covered += length;
    }
    EXPECT_EQ(covered, bytes);
    pinned.release([&](const registration_chunk& done) {
      std::lock_guard guard(handing);
      handed_back.push_back(done.offset);
    });
    EXPECT_FALSE(pinned.pinned());
  }
  EXPECT_EQ(driver.live(), 0);
  std::sort(handed_back.begin(), handed_back.end());
  ASSERT_EQ(handed_back.size(), 38U);
  for (std::size_t i = 0; i < handed_back.size(); ++i) EXPECT_EQ(handed_back[i], i * chunk);
}

// Registered a part at a time, from threads that fault each part in first; a refusal mid-way
// leaves what was added registered until the whole is released, and nothing after.
TEST(PinnedWithADriver, PartsAddedFromManyThreadsAndARefusalInOneSentence) {
  FakeDriver driver;
  constexpr std::size_t part = 256 << 10, parts = 16;
  std::vector<char> memory(part * parts);
  {
    auto pinned = pinned_registration::in_parts(memory.data(), memory.size(), 3);
    EXPECT_FALSE(pinned.pinned());
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (std::size_t i = t; i < parts; i += 4) pinned.add({i * part, part});
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(pinned.chunks(), parts);
    EXPECT_EQ(driver.live(), static_cast<int>(parts));
  }
  EXPECT_EQ(driver.live(), 0);
  setenv("FAKE_CUDA_MAX_BYTES", std::to_string(part).c_str(), 1);
  {
    auto pinned = pinned_registration::in_parts(memory.data(), memory.size(), 2);
    pinned.add({0, part});
    try {
      pinned.add({part, 2 * part});
      ADD_FAILURE() << "the driver refused, and the part was taken";
    } catch (const pinning_error& error) {
      EXPECT_NE(std::string(error.what()).find("would not pin 524288 bytes at offset 262144"), std::string::npos) << error.what();
    }
    EXPECT_EQ(pinned.chunks(), 1U);
    EXPECT_THROW(pinned_registration(memory.data(), memory.size(), {.chunk_bytes = 2 * part, .threads = 3}), pinning_error);
    EXPECT_EQ(driver.live(), 1) << "a refused plan leaves none of its own chunks registered";
  }
  unsetenv("FAKE_CUDA_MAX_BYTES");
  EXPECT_EQ(driver.live(), 0);
}

TEST(PinnedWithADriver, TheCApiPinsAndUnpins) {
  FakeDriver driver;
  memcost_options options;
  memcost_options_init(&options);
  options.pinned = 1;
  memcost_array* array = nullptr;
  ASSERT_EQ(memcost_array_create_zeroed(1 << 20, 4, &options, &array), MEMCOST_OK) << memcost_last_error();
  EXPECT_EQ(driver.live(), 1);
  memcost_array_destroy(array);
  EXPECT_EQ(driver.live(), 0);
}

// A standard container's big blocks, pinned: registered once faulted in, unregistered when given
// back, kept registered by a pool.
TEST(PinnedWithADriver, TheStandardAllocatorPinsBigBlocks) {
  FakeDriver driver;
  ASSERT_NE(driver.library, nullptr);
  {
    big_memory_resource pinned({.pinned = true});
    {
      std::vector<float, allocator<float>> v(1 << 20, 1.0F, allocator<float>(&pinned));
      EXPECT_EQ(driver.live(), 1);
      EXPECT_TRUE(pinned.last_report().pinned);
      EXPECT_EQ(v[12345], 1.0F);
    }
    EXPECT_EQ(driver.live(), 0) << "unregistered when the vector gave its block back";
  }
  array_pool pool(64 << 20);
  {
    big_memory_resource pooled({.pool = &pool, .pinned = true});
    { std::vector<float, allocator<float>> v(1 << 20, 1.0F, allocator<float>(&pooled)); }
    EXPECT_EQ(driver.live(), 1) << "held by the pool, still registered";
    const int registrations = driver.registrations();
    { std::vector<float, allocator<float>> v(1 << 20, 2.0F, allocator<float>(&pooled)); }
    EXPECT_EQ(driver.registrations(), registrations) << "taken back from the pool registered";
  }
  pool.release();
  EXPECT_EQ(driver.live(), 0);
}

// The calls the `pinned` experiment makes besides registering: the driver's own pinned allocation,
// a buffer on the GPU and a copy into it, and the GPU's name.
TEST(PinnedWithADriver, TheExperimentsCallsAllocateCopyAndFree) {
  std::string why_not;
  detail::cuda_driver* driver = detail::cuda_driver::get(why_not);
  ASSERT_NE(driver, nullptr) << why_not;
  EXPECT_NE(driver->device_name().find("fake GPU"), std::string::npos) << driver->device_name();
  void* host = nullptr;
  ASSERT_EQ(driver->host_alloc(1 << 20, &host), "");
  std::memset(host, 0x5a, 1 << 20);
  unsigned long long device = 0;
  ASSERT_EQ(driver->device_alloc(1 << 20, &device), "");
  ASSERT_EQ(driver->copy_to_device(device, host, 1 << 20), "");
  // The stand-in's GPU memory is the process's own: the copy can be read back.
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(device)[(1 << 20) - 1], 0x5a);
  driver->device_free(device);
  driver->free_host(host);
}

// Where there is no driver library, or no GPU: one sentence that says which, and nothing made.
void expect_one_clear_error(const std::string& says) {
  EXPECT_NE(pinning_unavailable().find(says), std::string::npos) << pinning_unavailable();
  try {
    auto array = make_big_array<float>(1 << 20, zero, {.pinned = true});
    ADD_FAILURE() << "pinned without a GPU";
  } catch (const pinning_error& error) {
    EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
  }
  memcost_options options;
  memcost_options_init(&options);
  options.pinned = 1;
  memcost_array* array = nullptr;
  EXPECT_EQ(memcost_array_create_zeroed(1 << 20, 4, &options, &array), MEMCOST_ERROR_NO_GPU);
  EXPECT_EQ(array, nullptr);
  EXPECT_NE(std::string(memcost_last_error()).find(says), std::string::npos) << memcost_last_error();
  // Unpinned arrays are unaffected.
  auto plain = make_big_array<float>(1 << 20, zero);
  EXPECT_FALSE(plain.report().pinned);
}

TEST(PinnedWithoutADriver, IsOneClearError) { expect_one_clear_error("no CUDA driver here"); }

TEST(PinnedWithoutAGpu, IsOneClearError) { expect_one_clear_error("no GPU here"); }

TEST(PinnedOnThisMachine, ThirtyTwoMiBPinnedByTheRealDriver) {
  if (std::string why = pinning_unavailable(); !why.empty()) GTEST_SKIP() << why;
  auto array = make_big_array<float>(8 << 20, zero, {.pinned = true});
  EXPECT_TRUE(array.report().pinned);
  EXPECT_GT(array.report().pin_seconds, 0.0);
}

}  // namespace
}  // namespace memcost
