// The Linux values the traced kernel's records carry (mmap's flags, madvise's advice), in one
// place. They describe the kernel that was traced, not the machine the code is built for: the
// attribution is also compiled into the Windows tests, where <sys/mman.h> does not exist. Where it
// does, the values are checked against it.
#pragma once

#include <cstdint>

namespace memcost::trace::linux_abi {

inline constexpr std::uint64_t kMapPrivate = 0x02, kMapAnonymous = 0x20;
// x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl): the calls that fault pages in.
inline constexpr long kSysMmap = 9, kSysIoctl = 16, kSysMremap = 25, kSysMadvise = 28, kSysMlock = 149, kSysMlockall = 151,
                      kSysMlock2 = 325, kSysIoUringRegister = 427;
// io_uring_register's opcode for registering buffers, and the flag that may be or-ed into it.
inline constexpr std::uint64_t kIoringRegisterBuffers = 0, kIoringRegisterUseRegisteredRing = std::uint64_t{1} << 31;
// NVIDIA's driver (the open driver's nv_escape.h, nvos.h, cl0071.h): its ioctls' type, the three
// that can pin an OS descriptor, that class, and VID_HEAP_CONTROL's function for it. Also in
// trace/sources/bpf/fault_counts.bpf.c, which reads their structures.
inline constexpr std::uint64_t kNvIoctlType = 'F', kNvEscRmAllocMemory = 0x27, kNvEscRmAlloc = 0x2b,
                                kNvEscRmVidHeapControl = 0x4a;
inline constexpr std::uint32_t kNvOsDescriptorClass = 0x71, kNvos32AllocOsDescriptor = 27;
inline constexpr std::uint64_t kMadvDontneed = 4, kMadvFree = 8, kMadvRemove = 9, kMadvHugepage = 14, kMadvNohugepage = 15;

}  // namespace memcost::trace::linux_abi

#if __has_include(<sys/syscall.h>) && defined(__x86_64__)
#include <sys/syscall.h>
static_assert(SYS_mmap == memcost::trace::linux_abi::kSysMmap && SYS_ioctl == memcost::trace::linux_abi::kSysIoctl &&
              SYS_mremap == memcost::trace::linux_abi::kSysMremap && SYS_madvise == memcost::trace::linux_abi::kSysMadvise &&
              SYS_mlock == memcost::trace::linux_abi::kSysMlock && SYS_mlockall == memcost::trace::linux_abi::kSysMlockall &&
              SYS_mlock2 == memcost::trace::linux_abi::kSysMlock2 &&
              SYS_io_uring_register == memcost::trace::linux_abi::kSysIoUringRegister);
#endif

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
static_assert(MAP_PRIVATE == memcost::trace::linux_abi::kMapPrivate && MAP_ANONYMOUS == memcost::trace::linux_abi::kMapAnonymous);
static_assert(MADV_DONTNEED == memcost::trace::linux_abi::kMadvDontneed && MADV_FREE == memcost::trace::linux_abi::kMadvFree &&
              MADV_REMOVE == memcost::trace::linux_abi::kMadvRemove && MADV_HUGEPAGE == memcost::trace::linux_abi::kMadvHugepage &&
              MADV_NOHUGEPAGE == memcost::trace::linux_abi::kMadvNohugepage);
#endif
