// The registers a sample copies for unwinding, per architecture: the frame pointer, the stack
// pointer and the program counter, and their DWARF numbers for libdwfl. The one place that
// knows the architecture.
#pragma once

#include <asm/perf_regs.h>

#include <cstdint>

namespace memcost::trace::detail {

#if defined(__x86_64__)
// perf writes the registers in the order of their bits: rbp (6), rsp (7), rip (8).
inline constexpr std::uint64_t kUserRegsMask =
    (1ULL << PERF_REG_X86_BP) | (1ULL << PERF_REG_X86_SP) | (1ULL << PERF_REG_X86_IP);
inline constexpr int kDwarfFramePointer = 6;  // rbp
inline constexpr int kDwarfStackPointer = 7;  // rsp
#elif defined(__aarch64__)
// x29 (29, the frame pointer), sp (31), pc (32), in that order.
inline constexpr std::uint64_t kUserRegsMask =
    (1ULL << PERF_REG_ARM64_X29) | (1ULL << PERF_REG_ARM64_SP) | (1ULL << PERF_REG_ARM64_PC);
inline constexpr int kDwarfFramePointer = 29;  // x29
inline constexpr int kDwarfStackPointer = 31;  // sp
#else
#error "memcost trace knows the user registers of x86-64 and arm64 only: add this architecture's to src/trace/perf/arch.hpp"
#endif

}  // namespace memcost::trace::detail
