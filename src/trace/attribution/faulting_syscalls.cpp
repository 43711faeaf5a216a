// The system calls that fault pages in without an exception (see CallFaults in tracer.hpp): the
// range each works on and its name, by the traced kernel's numbers (linux_abi.hpp), and by the
// layouts of the structures NVIDIA's driver and io_uring take (below).
#include <cstring>
#include <string>

#include "trace/attribution/linux_abi.hpp"
#include "trace/tracer.hpp"

namespace memcost::trace {

using namespace linux_abi;

namespace {

// An unsigned field at `offset`, where `bytes` holds it whole.
template <class T>
bool field(std::span<const std::uint8_t> bytes, std::size_t offset, T& value) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return true;
}

// An ioctl of NVIDIA's driver that pins memory of the process (os_lock_user_pages, which faults in
// what is not yet present): an OS descriptor made of [address, address + limit + 1). Three doors
// lead there (the open driver's escape.c), each with its own structure (nvos.h):
// - NV_ESC_RM_ALLOC_MEMORY, NVOS02_PARAMETERS with class NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
//   hClass at 12, pMemory at 24, limit at 32;
// - NV_ESC_RM_VID_HEAP_CONTROL, NVOS32_PARAMETERS with function ALLOC_OS_DESCRIPTOR: function at 8,
//   data.AllocOsDesc.descriptor at 64, limit at 72;
// - NV_ESC_RM_ALLOC of that class (NVOS21/NVOS64_PARAMETERS: hClass at 12), whose pAllocParms
//   points to NV_OS_DESC_MEMORY_ALLOCATION_PARAMS: descriptor at 16, limit at 24.
void nvidia_range(CallFaults& call, std::uint64_t command, std::span<const std::uint8_t> argument,
                  std::span<const std::uint8_t> inner) {
  if (((command >> 8) & 0xff) != kNvIoctlType) return;
  std::uint32_t object_class = 0, function = 0;
  std::uint64_t address = 0, limit = 0;
  bool named = false;
  switch (command & 0xff) {
    case kNvEscRmAllocMemory:
      named = field(argument, 12, object_class) && object_class == kNvOsDescriptorClass && field(argument, 24, address) &&
              field(argument, 32, limit);
      break;
    case kNvEscRmVidHeapControl:
      named = field(argument, 8, function) && function == kNvos32AllocOsDescriptor && field(argument, 64, address) &&
              field(argument, 72, limit);
      break;
    case kNvEscRmAlloc:
      named = field(argument, 12, object_class) && object_class == kNvOsDescriptorClass && field(inner, 16, address) &&
              field(inner, 24, limit);
      break;
    default: break;
  }
  if (!named || limit == ~std::uint64_t{0} || address + limit < address) return;  // the driver refuses these too
  call.start = address;
  call.length = limit + 1;
}

// io_uring_register(fd, IORING_REGISTER_BUFFERS, iovecs, count): each iovec's buffer is pinned
// (pin_user_pages, FOLL_LONGTERM), its pages faulted in where they are not present yet. The first
// four iovecs are read (iov_base, iov_len: 16 bytes each).
void io_uring_ranges(CallFaults& call, const std::uint64_t (&args)[6], std::span<const std::uint8_t> argument) {
  if ((args[1] & ~kIoringRegisterUseRegisteredRing) != kIoringRegisterBuffers) return;
  for (std::size_t i = 0; i < 1 + call.further.size() && i < args[3]; ++i) {
    std::uint64_t base = 0, length = 0;
    if (!field(argument, i * 16, base) || !field(argument, i * 16 + 8, length) || base + length < base) return;
    if (i == 0) {
      call.start = base;
      call.length = length;
    } else {
      call.further[i - 1] = {base, length};
    }
  }
}

}  // namespace

void set_call_range(CallFaults& call, const std::uint64_t (&args)[6], std::int64_t result,
                    std::span<const std::uint8_t> argument, std::span<const std::uint8_t> inner) {
  call.start = call.length = 0;
  call.further = {};
  const bool failed = result < 0 && result > -4096;
  if ((call.syscall == kSysMmap || call.syscall == kSysMremap) && !failed) {
    call.start = static_cast<std::uint64_t>(result);
    call.length = call.syscall == kSysMmap ? args[1] : args[2];
  } else if (call.syscall == kSysMadvise || call.syscall == kSysMlock || call.syscall == kSysMlock2) {
    call.start = args[0];
    call.length = args[1];
  } else if (call.syscall == kSysIoctl) {
    nvidia_range(call, args[1], argument, inner);
  } else if (call.syscall == kSysIoUringRegister) {
    io_uring_ranges(call, args, argument);
  }
}

std::string syscall_name(long syscall) {
  switch (syscall) {
    case kSysMmap: return "mmap";
    case kSysIoctl: return "ioctl";
    case kSysMremap: return "mremap";
    case kSysMadvise: return "madvise";
    case kSysMlock: return "mlock";
    case kSysMlockall: return "mlockall";
    case kSysMlock2: return "mlock2";
    case kSysIoUringRegister: return "io_uring_register";
    default: return "syscall " + std::to_string(syscall);
  }
}

}  // namespace memcost::trace
