// The range a call that faulted pages in works on (trace/attribution/faulting_syscalls.cpp): from its
// arguments, and for NVIDIA's pinning ioctls and io_uring's buffer registration from the structure
// its third argument points to, which comes from the traced process: random bytes never make it
// read past what it was given (this suite runs under AddressSanitizer in `make test-asan`).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "trace/attribution/linux_abi.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace {
namespace {

using namespace linux_abi;

// _IOWR('F', nr, size), as NVIDIA's user-space library makes its commands.
std::uint64_t nv_command(std::uint64_t nr, std::uint64_t size) { return (3ULL << 30) | (size << 16) | ('F' << 8) | nr; }

template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

CallFaults called(long syscall) {
  CallFaults call;
  call.syscall = syscall;
  return call;
}

TEST(FaultingSyscalls, TheCallsThatNameTheirRangeInTheirArguments) {
  const std::uint64_t mmap_args[6] = {0, 1 << 20, 3, 0x22, ~0ULL, 0};
  CallFaults call = called(kSysMmap);
  set_call_range(call, mmap_args, 0x7f0000000000);
  EXPECT_EQ(call.start, 0x7f0000000000U);
  EXPECT_EQ(call.length, 1U << 20);
  set_call_range(call, mmap_args, -12);  // ENOMEM: no range
  EXPECT_EQ(call.length, 0U);
  const std::uint64_t madvise_args[6] = {0x10000, 8192, 23};
  call = called(kSysMadvise);
  set_call_range(call, madvise_args, 0);
  EXPECT_EQ(call.start, 0x10000U);
  EXPECT_EQ(call.length, 8192U);
  EXPECT_EQ(syscall_name(kSysIoUringRegister), "io_uring_register");
}

// The three doors of NVIDIA's driver to pinning an OS descriptor, each read at its own offsets.
TEST(FaultingSyscalls, AnNvidiaPinningIoctlNamesTheMemoryItsParametersDescribe) {
  const std::uint64_t address = 0x7f1234560000, bytes = 1ULL << 30;
  // NV_ESC_RM_ALLOC_MEMORY, NVOS02_PARAMETERS with its fd: 56 bytes.
  std::vector<std::uint8_t> nvos02(56);
  put<std::uint32_t>(nvos02, 12, kNvOsDescriptorClass);
  put<std::uint64_t>(nvos02, 24, address);
  put<std::uint64_t>(nvos02, 32, bytes - 1);
  std::uint64_t args[6] = {3, nv_command(kNvEscRmAllocMemory, 56), 0x7ffd0000};
  CallFaults call = called(kSysIoctl);
  set_call_range(call, args, 0, nvos02);
  EXPECT_EQ(call.start, address);
  EXPECT_EQ(call.length, bytes);
  put<std::uint32_t>(nvos02, 12, 0x3e);  // NV01_MEMORY_SYSTEM: the driver's own memory, not the process's
  set_call_range(call, args, 0, nvos02);
  EXPECT_EQ(call.length, 0U);
  // NV_ESC_RM_VID_HEAP_CONTROL, NVOS32_PARAMETERS (the first 80 bytes of 184 read).
  std::vector<std::uint8_t> nvos32(80);
  put<std::uint32_t>(nvos32, 8, kNvos32AllocOsDescriptor);
  put<std::uint64_t>(nvos32, 64, address);
  put<std::uint64_t>(nvos32, 72, bytes - 1);
  args[1] = nv_command(kNvEscRmVidHeapControl, 184);
  set_call_range(call, args, 0, nvos32);
  EXPECT_EQ(call.start, address);
  EXPECT_EQ(call.length, bytes);
  // NV_ESC_RM_ALLOC, NVOS64_PARAMETERS of that class, and the parameters its pAllocParms points to.
  std::vector<std::uint8_t> nvos64(32), descriptor(32);
  put<std::uint32_t>(nvos64, 12, kNvOsDescriptorClass);
  put<std::uint64_t>(descriptor, 16, address);
  put<std::uint64_t>(descriptor, 24, bytes - 1);
  args[1] = nv_command(kNvEscRmAlloc, 48);
  set_call_range(call, args, 0, nvos64, descriptor);
  EXPECT_EQ(call.start, address);
  EXPECT_EQ(call.length, bytes);
  set_call_range(call, args, 0, nvos64, {});  // the inner parameters could not be read
  EXPECT_EQ(call.length, 0U);
  // Another driver's ioctl with the same number: not NVIDIA's type, no range.
  args[1] = (3ULL << 30) | (56ULL << 16) | ('T' << 8) | kNvEscRmAllocMemory;
  set_call_range(call, args, 0, nvos02);
  EXPECT_EQ(call.length, 0U);
}

TEST(FaultingSyscalls, IoUringsBufferRegistrationNamesEachBuffer) {
  std::vector<std::uint8_t> iovecs(64);
  for (std::uint64_t i = 0; i < 4; ++i) {
    put<std::uint64_t>(iovecs, i * 16, 0x100000000 * (i + 1));
    put<std::uint64_t>(iovecs, i * 16 + 8, (i + 1) << 20);
  }
  std::uint64_t args[6] = {5, kIoringRegisterBuffers, 0x7ffd0000, 3};
  CallFaults call = called(kSysIoUringRegister);
  set_call_range(call, args, 0, iovecs);
  EXPECT_EQ(call.start, 0x100000000U);
  EXPECT_EQ(call.length, 1U << 20);
  EXPECT_EQ(call.further[0].start, 0x200000000U);
  EXPECT_EQ(call.further[1].length, 3U << 20);
  EXPECT_EQ(call.further[2].length, 0U) << "three buffers registered, three named";
  args[1] = 2;  // IORING_REGISTER_FILES: no memory pinned
  set_call_range(call, args, 0, iovecs);
  EXPECT_EQ(call.length, 0U);
}

// Bytes from the traced process: random structures, sizes and commands never read past the bytes
// given (AddressSanitizer), and a range found never wraps around the address space.
TEST(FaultingSyscalls, RandomArgumentBytesAreReadWithinTheirLength) {
  std::mt19937_64 random(20261126);
  const std::uint64_t commands[] = {kNvEscRmAllocMemory, kNvEscRmAlloc, kNvEscRmVidHeapControl, 0x2a};
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::uint8_t> argument(random() % 120), inner(random() % 40);
    for (auto& byte : argument) byte = static_cast<std::uint8_t>(random() % 4 == 0 ? random() : random() % 2);
    for (auto& byte : inner) byte = static_cast<std::uint8_t>(random());
    if (argument.size() >= 16 && random() % 2) put<std::uint32_t>(argument, 12, kNvOsDescriptorClass);
    if (argument.size() >= 12 && random() % 2) put<std::uint32_t>(argument, 8, kNvos32AllocOsDescriptor);
    const bool ioctl = random() % 2;
    std::uint64_t args[6] = {random(), ioctl ? nv_command(commands[random() % 4], random() % 256) : random() % 3,
                             random(), random() % 6, random(), random()};
    CallFaults call = called(ioctl ? kSysIoctl : kSysIoUringRegister);
    set_call_range(call, args, static_cast<std::int64_t>(random()), argument, inner);
    EXPECT_GE(call.start + call.length, call.start);
    for (const auto& range : call.further) EXPECT_GE(range.start + range.length, range.start);
  }
}

}  // namespace
}  // namespace memcost::trace
