// Platform-independent parts of the OS layer: names and page sizes of the kinds.
#include "os/os.hpp"

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace memcost::os {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const char* page_kind_name(PageKind kind) {
  switch (kind) {
    case PageKind::system: return "system";
    case PageKind::base: return "base";
    case PageKind::thp: return "thp";
    case PageKind::huge_2mb: return "hugetlb-2M";
    case PageKind::huge_1gb: return "hugetlb-1G";
  }
  return "?";
}

std::size_t page_kind_bytes(PageKind kind) {
  switch (kind) {
    case PageKind::huge_2mb: return std::size_t{2} << 20;
    case PageKind::huge_1gb: return std::size_t{1} << 30;
    default: return base_page_size();
  }
}

const char* perf_event_name(PerfEvent event) {
  switch (event) {
    case PerfEvent::page_faults: return "page_faults";
    case PerfEvent::task_clock: return "task_clock";
    case PerfEvent::tlb_flush_tracepoint: return "tlb:tlb_flush";
    case PerfEvent::page_fault_user_tracepoint: return "exceptions:page_fault_user";
  }
  return "?";
}

void touch_pages(void* address, std::size_t size_bytes, std::size_t stride_bytes) {
  // An atomic OR with 0 is one write access that keeps the contents. A plain
  // read followed by a write would fault twice on fresh Linux memory: first to
  // map the shared zero page, then to copy it on write.
  auto* bytes = static_cast<unsigned char*>(address);
  for (std::size_t offset = 0; offset < size_bytes; offset += stride_bytes) {
    std::atomic_ref<unsigned char>(bytes[offset]).fetch_or(0, std::memory_order_relaxed);
  }
}

// CPUID leaf 1 ECX bit 31 is set by every hypervisor; leaf 0x40000000 names it.
std::optional<std::string> hypervisor_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1U << 31)) == 0) return std::string();
  __cpuid(0x40000000, eax, ebx, ecx, edx);
  char signature[13] = {};
  std::memcpy(signature, &ebx, 4);
  std::memcpy(signature + 4, &ecx, 4);
  std::memcpy(signature + 8, &edx, 4);
  const std::string id(signature);
  if (id == "KVMKVMKVM") return "KVM";
  if (id == "Microsoft Hv") return "Microsoft Hyper-V";
  if (id == "VMwareVMware") return "VMware";
  if (id == "XenVMMXenVMM") return "Xen";
  if (id == "TCGTCGTCGTCG") return "QEMU (TCG)";
  return id;
#else
  return std::nullopt;
#endif
}

}  // namespace memcost::os
