// Reading the perf ring buffers' records (see record_reader.hpp).
#include "trace/perf/record_reader.hpp"

#include <sys/mman.h>

#include <algorithm>

#include "trace/sources/bpf/fault_counts.h"
#include "memcost/measure.hpp"

namespace memcost::trace::detail {

std::uint64_t RecordReader::drain(bool final, const std::function<void()>& behind) {
  // Records of events older than this are all in the buffers by now, whichever CPU wrote them.
  const std::uint64_t settled = final ? UINT64_MAX : measure::now_ns() - 20'000'000ULL;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    auto* meta = static_cast<perf_event_mmap_page*>(buffers[i].base);
    spans[i] = {meta->data_tail, __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE)};
  }
  for (bool samples : {false, true}) {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      RingBuffer& buffer = buffers[i];
      auto* meta = static_cast<perf_event_mmap_page*>(buffer.base);
      const auto* data = static_cast<const std::uint8_t*>(buffer.base) + page_size_;
      std::uint64_t at = spans[i].first;
      std::size_t handled = 0;
      while (at < spans[i].second) {
        perf_event_header header{};
        copy_out(data, buffer.data_bytes, at, &header, sizeof(header));
        if (header.size < sizeof(header)) break;
        if ((header.type == PERF_RECORD_SAMPLE) == samples) {
          const std::size_t start = at % buffer.data_bytes;
          if (start + header.size <= buffer.data_bytes) {
            handle(data + start, header.size);
          } else {
            wrapped_.resize(header.size);
            copy_out(data, buffer.data_bytes, at, wrapped_.data(), header.size);
            handle(wrapped_.data(), header.size);
          }
        }
        at += header.size;
        if (samples && ++handled % check_every == 0) {
          __atomic_store_n(&meta->data_tail, at, __ATOMIC_RELEASE);
          if (behind && fullest() > behind_at) behind();
        }
      }
      if (samples) __atomic_store_n(&meta->data_tail, at, __ATOMIC_RELEASE);
    }
  }
  pair_calls(settled);
  return settled;
}

double RecordReader::fullest() const {
  double fullest = 0;
  for (const RingBuffer& buffer : buffers) {
    const auto* meta = static_cast<const perf_event_mmap_page*>(buffer.base);
    const std::uint64_t used = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE) - meta->data_tail;
    fullest = std::max(fullest, static_cast<double>(used) / static_cast<double>(buffer.data_bytes));
  }
  return fullest;
}

void RecordReader::copy_out(const std::uint8_t* data, std::size_t size, std::uint64_t from, void* out, std::size_t bytes) {
  std::size_t start = from % size;
  std::size_t first = std::min(bytes, size - start);
  std::memcpy(out, data + start, first);
  std::memcpy(static_cast<std::uint8_t*>(out) + first, data, bytes - first);
}

const Event* RecordReader::event_of(const std::uint8_t* record, std::size_t size) const {
  const auto* header = reinterpret_cast<const perf_event_header*>(record);
  std::uint64_t id = 0;
  if (header->type == PERF_RECORD_SAMPLE) std::memcpy(&id, record + sizeof(perf_event_header), sizeof(id));
  else std::memcpy(&id, record + size - sizeof(id), sizeof(id));  // sample_id_all: the identifier is last
  auto found = events.find(id);
  return found == events.end() ? nullptr : &found->second;
}

void RecordReader::handle(const std::uint8_t* record, std::size_t size) {
  const auto* header = reinterpret_cast<const perf_event_header*>(record);
  Reader in{record + sizeof(perf_event_header), record + size};
  switch (header->type) {
    case PERF_RECORD_SAMPLE:
      if (const Event* event = event_of(record, size)) sample(*event, in, header->misc);
      break;
    case PERF_RECORD_MMAP2: {
      auto pid = in.take<std::uint32_t>();
      in.skip(4);
      FileMapping mapping;
      mapping.start = in.take<std::uint64_t>();
      mapping.end = mapping.start + in.take<std::uint64_t>();
      mapping.offset = in.take<std::uint64_t>();
      in.skip(4 + 4 + 8 + 8);  // maj, min, ino, ino_generation
      auto prot = in.take<std::uint32_t>();
      in.skip(4);
      mapping.path = reinterpret_cast<const char*>(in.at);
      if ((prot & PROT_EXEC) && !mapping.path.empty() && mapping.path[0] == '/') unwinder_.add_mapping(static_cast<int>(pid), mapping);
      break;
    }
    case PERF_RECORD_COMM: {
      auto pid = static_cast<int>(in.take<std::uint32_t>());
      auto tid = static_cast<int>(in.take<std::uint32_t>());
      std::string name(reinterpret_cast<const char*>(in.at), strnlen(reinterpret_cast<const char*>(in.at), 16));
      if ((header->misc & PERF_RECORD_MISC_COMM_EXEC) && pid == tid) {
        unwinder_.exec(pid);
        names_[pid] = name;
        // sample_id_all: pid, tid, time and the identifier close the record.
        std::uint64_t time = 0;
        std::memcpy(&time, record + size - 2 * sizeof(std::uint64_t), sizeof(time));
        sink_.process({ProcessChange::exec, pid, 0, time, name});
      }
      break;
    }
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
      auto pid = static_cast<int>(in.take<std::uint32_t>());
      auto ppid = static_cast<int>(in.take<std::uint32_t>());
      auto tid = static_cast<int>(in.take<std::uint32_t>());
      in.skip(4);  // ptid
      auto time = in.take<std::uint64_t>();
      if (pid != tid) break;  // a thread, not a process
      if (header->type == PERF_RECORD_FORK) {
        if (pid == ppid) break;
        unwinder_.fork(ppid, pid);
        names_[pid] = names_[ppid];
        sink_.process({ProcessChange::fork, pid, ppid, time, names_[pid]});
      } else {
        sink_.process({ProcessChange::exit, pid, 0, time, names_[pid]});
      }
      break;
    }
    case PERF_RECORD_LOST:
      in.skip(8);
      lost += in.take<std::uint64_t>();
      break;
    case PERF_RECORD_LOST_SAMPLES:
      lost += in.take<std::uint64_t>();
      break;
    default:
      break;
  }
}

void RecordReader::sample(const Event& event, Reader& in, std::uint16_t misc) {
  in.skip(8);  // identifier
  auto pid = static_cast<int>(in.take<std::uint32_t>());
  auto tid = static_cast<int>(in.take<std::uint32_t>());
  auto time = in.take<std::uint64_t>();
  std::uint64_t address = (event.sample_type & PERF_SAMPLE_ADDR) ? in.take<std::uint64_t>() : 0;
  std::uint64_t period = (event.sample_type & PERF_SAMPLE_PERIOD) ? in.take<std::uint64_t>() : 1;
  bool user = (misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER;
  if (event.kind == EventKind::cpu) {
    CpuSample cpu{pid, tid, time, false, false, false};
    const auto count = in.take<std::uint64_t>();
    for (std::uint64_t i = 0; i < count && in.at < in.end; ++i) {
      const auto ip = in.take<std::uint64_t>();
      if (ip >= static_cast<std::uint64_t>(PERF_CONTEXT_MAX) || kernel == nullptr) continue;  // a context marker
      cpu.in_fault = cpu.in_fault || kernel->in_fault(ip);
      cpu.zeroing = cpu.zeroing || kernel->zeroing(ip);
      cpu.tracing = cpu.tracing || kernel->tracing(ip);
    }
    cpu.zeroing = cpu.zeroing && cpu.in_fault && !cpu.tracing;
    sink_.cpu_sample(cpu);
    return;
  }
  std::uint64_t args[6] = {};
  std::optional<CallKind> call;
  std::optional<CallFaults> call_faults;
  bool unreadable = false;
  std::uint64_t python_release = 0;  // the GIL release the sampled thread was in (bpf/fault_counts.h)
  if (event.sample_type & PERF_SAMPLE_RAW) {
    auto size = in.take<std::uint32_t>();
    const std::uint8_t* raw = in.at;
    std::uint32_t kind = 0;
    if (event.touch_in_raw && size >= sizeof(kind)) std::memcpy(&kind, raw, sizeof(kind));
    if (kind == MEMCOST_OUTPUT_TOUCH && size >= sizeof(memcost_touch_sample)) {
      // Sent from inside the kernel's fault handling: the sample's own mode is the kernel's.
      memcost_touch_sample touch{};
      std::memcpy(&touch, raw, sizeof(touch));
      address = touch.address;
      period = touch.faults;
      user = touch.user != 0;
      python_release = touch.python_release;
    } else if (kind == MEMCOST_OUTPUT_CALL_FAULTS && size >= sizeof(memcost_call_faults)) {
      memcost_call_faults record{};
      std::memcpy(&record, raw, sizeof(record));
      CallFaults faults{pid, tid, record.enter_ns, time, static_cast<long>(record.syscall), 0, 0, record.faults, 0};
      std::uint64_t call_args[6];
      std::copy(std::begin(record.args), std::end(record.args), std::begin(call_args));
      const std::span<const std::uint8_t> argument(record.argument, MEMCOST_CALL_ARGUMENT_BYTES);
      set_call_range(faults, call_args, record.result,
                     argument.first(std::min<std::size_t>(record.argument_bytes, MEMCOST_CALL_INNER_AT)),
                     argument.subspan(MEMCOST_CALL_INNER_AT,
                                      std::min<std::size_t>(record.inner_bytes, MEMCOST_CALL_ARGUMENT_BYTES - MEMCOST_CALL_INNER_AT)));
      call_faults = faults;
      python_release = record.python_release;
    } else if (event.touch_in_raw) {
      unreadable = true;  // not the counter's (never expected): counted, not read
      ++malformed;
    }
    for (std::size_t i = 0; i < event.offsets.size() && i < 6; ++i) {
      if (event.offsets[i] + 8 <= size) std::memcpy(&args[i], raw + event.offsets[i], 8);
    }
    std::int64_t number = -1;
    if (event.number_offset + 8 <= size) std::memcpy(&number, raw + event.number_offset, 8);
    call = mapping_call(static_cast<long>(number));
    in.skip(size);
  }
  std::uint32_t stack = 0;
  bool compat = false;  // a 32-bit program: raw_syscalls gives its calls their own numbers
  if (event.sample_type & PERF_SAMPLE_REGS_USER) {
    auto abi = in.take<std::uint64_t>();
    compat = abi == PERF_SAMPLE_REGS_ABI_32;
    std::uint64_t bp = 0, sp = 0, user_ip = 0;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
      bp = in.take<std::uint64_t>();
      sp = in.take<std::uint64_t>();
      user_ip = in.take<std::uint64_t>();
    }
    auto size = in.take<std::uint64_t>();
    const std::uint8_t* bytes = in.at;
    in.skip(size);
    std::uint64_t dynamic = size ? in.take<std::uint64_t>() : 0;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE && event.kind == EventKind::enter && call && !stack_names_call(*call, args)) {
      (void)unwinder_.read_links(pid, bytes, std::min(dynamic, size));
    } else if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
      const bool moves_break = call == CallKind::brk && args[0] != 0;
      stack = unwinder_.stack(pid, tid, bp, sp, user_ip, bytes, std::min(dynamic, size), time, python_release, moves_break);
    }
  }
  switch (event.kind) {
    case EventKind::fault:
      if (call_faults) {
        call_faults->stack = stack;
        sink_.call_faults(*call_faults);
      } else if (!unreadable) {
        sink_.fault({pid, tid, time, address, stack, user, event.counted, period});
      }
      break;
    case EventKind::cpu:
      break;
    case EventKind::enter:
    case EventKind::exit: {
      // Another system call (the kernel's filter keeps these out), or a 32-bit program's call whose
      // number is one of ours (its exit then finds no entry, and is passed over too).
      if (!call || compat) break;
      SyscallEvent record{time, pid, tid, *call, event.kind == EventKind::enter, stack, {}};
      std::copy(std::begin(args), std::end(args), std::begin(record.args));
      syscalls_.push_back(record);
      break;
    }
  }
}

void RecordReader::pair_calls(std::uint64_t settled) {
  std::stable_sort(syscalls_.begin(), syscalls_.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
  std::size_t done = 0;
  for (; done < syscalls_.size() && syscalls_[done].time <= settled; ++done) {
    const SyscallEvent& record = syscalls_[done];
    if (record.enter) {
      MappingCall call;
      call.kind = record.call;
      call.pid = record.pid;
      call.tid = record.tid;
      call.enter_ns = record.time;
      std::copy(std::begin(record.args), std::end(record.args), std::begin(call.args));
      call.stack = record.stack;
      open_[record.tid] = call;
      continue;
    }
    auto open = open_.find(record.tid);
    if (open == open_.end() || open->second.kind != record.call) continue;  // its entry came before tracing
    open->second.exit_ns = record.time;
    open->second.result = static_cast<std::int64_t>(record.args[0]);
    sink_.call(open->second);
    open_.erase(open);
  }
  syscalls_.erase(syscalls_.begin(), syscalls_.begin() + static_cast<std::ptrdiff_t>(done));
}

}  // namespace memcost::trace::detail
