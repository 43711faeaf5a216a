// `memcost-probe pinned`: every way to get N bytes of host memory pinned for a GPU, each phase timed
// (allocate, fault, register, unregister, free), and the copy to the GPU read back from each, so
// that memory that is not really pinned shows (docs/pinned.md). The CUDA driver is loaded at run
// time (big_array/cuda_driver.hpp); without one, or without a GPU, the run is one sentence, exit 4.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include "big_array/cuda_driver.hpp"
#include "memcost/big_array.hpp"
#include "memcost/measure.hpp"
#include "memcost/pinned.hpp"
#include "os/os.hpp"
#include "probe/arguments.hpp"
#include "probe/experiment.hpp"
#include "probe/rounds.hpp"

namespace memcost::probe {
namespace {

using json = nlohmann::json;

struct Settings {
  std::size_t size = std::size_t{1} << 30;
  std::size_t copy_size = std::size_t{1} << 30;
  std::size_t host_alloc_chunk = std::size_t{1} << 30;
  std::vector<std::string> register_chunks;  // sizes; empty: register_chunk_sizes' defaults
  std::vector<std::string> ways_filter;
  int rounds = 3;
  unsigned threads = 0;
  std::string budget;
  std::uint64_t order_seed = fresh_seed();  // recorded in the settings line either way
};

// What one way made: the memory, the largest piece one copy may take from it (a copy must stay
// within one registration or one allocation to run at pinned speed), and how it goes away.
struct PinnedMemory {
  unsigned char* data = nullptr;
  std::size_t copy_piece = 0;
  std::size_t registrations = 0;
  std::string page_kind;
  std::function<void(json& phases)> release;  // times unregister_s and free_s into `phases`
  std::size_t contiguous_bytes = 0;           // how much from `data` on is one block (0: all of it)
  std::size_t adjoining_bytes = 0;            // registrations of copy_piece each, side by side over this many
};

struct WayInputs {
  detail::cuda_driver& driver;
  std::size_t bytes;
  unsigned threads;
  std::size_t host_alloc_chunk;
};

struct Way {
  std::string name;
  bool pinned = true;  // false: the control, ordinary memory copied from as it is
  std::function<PinnedMemory(const WayInputs&, json& phases)> make;
};

template <class F>
double seconds_of(F&& f) {
  const std::uint64_t start = measure::now_ns();
  f();
  return static_cast<double>(measure::now_ns() - start) / 1e9;
}

[[noreturn]] void refused(const std::string& what, const std::string& error) {
  throw ProbeError(exit_failure, "driver_refused", "the CUDA driver refused " + what + ": " + error);
}

// Page by page, one write to each (the library's touch: a huge page is faulted in by its first), by
// `threads` threads taking chunks front to back (detail::fill_job, as make_big_array faults).
std::unique_ptr<detail::fill_job> start_touch(unsigned char* data, std::size_t bytes, std::size_t page_bytes, unsigned threads) {
  const std::size_t step = os::base_page_size();
  return std::make_unique<detail::fill_job>(bytes / step, step, page_bytes, threads, [data, step](std::size_t first, std::size_t last) {
    detail::fault_in(data + first * step, (last - first) * step, detail::fault_method::touch);
  });
}

// The chunks an overlapped way registers while the rest is still being faulted in: sixteen, of
// 64 MiB at least, on huge-page borders.
std::size_t overlap_chunk_bytes(std::size_t bytes) {
  const std::size_t huge = std::size_t{2} << 20;
  return std::max(std::size_t{64} << 20, (bytes / 16 + huge - 1) / huge * huge);
}

// How a mapped way registers its memory:
// - after: once every page is in, in one registration (chunks of at most 64 GiB) from one thread;
// - overlapped: one thread registers chunks of overlap_chunk_bytes as the touching threads finish
//   them;
// - threads_after: once every page is in, chunks of `chunk_bytes` registered by every thread;
// - threads_each: every thread touches a chunk of `chunk_bytes`, registers it, and takes the next
//   (faulting and registering overlapped, with no thread waiting on another).
// The chunked ways are unregistered by every thread too, each chunk unmapped as soon as it is
// unpinned (unpinning and unmapping overlapped).
// - following: one registration of the whole, begun at once on this thread while every thread
//   faults the pages in ahead of it, front to back (make_big_array's way).
enum class Registering { after, overlapped, threads_after, threads_each, following };

// Mapped by the OS as `kind`, faulted in by every thread and registered as `registering` says.
PinnedMemory mapped_and_registered(const WayInputs& inputs, json& phases, os::PageKind kind, Registering registering,
                                   std::size_t chunk_bytes = 0) {
  const std::size_t page = os::page_kind_bytes(kind);
  const std::size_t mapped = (inputs.bytes + page - 1) / page * page;
  os::MapRequest request{mapped, kind};
  if (kind == os::PageKind::thp) request.alignment_bytes = std::size_t{2} << 20;
  os::Mapping mapping;
  phases["allocate_s"] = seconds_of([&] { mapping = os::map(request); });
  if (!mapping.status.ok()) throw ProbeError(exit_failure, "map_failed", mapping.status.message());
  auto* data = static_cast<unsigned char*>(mapping.address);
  auto registration = std::make_shared<std::vector<pinned_registration>>();
  const std::size_t step = os::base_page_size();
  try {
    switch (registering) {
      case Registering::after:
        phases["fault_s"] = seconds_of([&] { start_touch(data, mapped, page, inputs.threads)->wait(); });
        phases["register_s"] = seconds_of([&] { registration->emplace_back(data, mapped); });
        break;
      case Registering::threads_after:
        phases["fault_s"] = seconds_of([&] { start_touch(data, mapped, page, inputs.threads)->wait(); });
        phases["register_s"] = seconds_of([&] {
          registration->emplace_back(data, mapped, registration_plan{chunk_bytes, inputs.threads});
        });
        break;
      case Registering::overlapped: {
        // One span from the first touch to the last registration: the phases overlap, so they
        // are not told apart (fault_s is when the last page was in).
        const auto chunks = registration_chunks(mapped, overlap_chunk_bytes(mapped), page);
        phases["register_s"] = seconds_of([&] {
          auto job = start_touch(data, mapped, page, inputs.threads);
          std::size_t next_page = 0;
          for (const registration_chunk& chunk : chunks) {
            for (const std::size_t end = (chunk.offset + chunk.bytes) / step; next_page < end;) {
              if (job->ready(next_page)) ++next_page;
              else std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
            registration->emplace_back(data + chunk.offset, chunk.bytes);
          }
          job->wait();
        });
        break;
      }
      case Registering::following:
        // One span: the registration and the touch overlap (the driver pins the pages the threads
        // have faulted in, and faults in any it reaches first).
        phases["register_s"] = seconds_of([&] {
          auto job = start_touch(data, mapped, page, inputs.threads);
          registration->emplace_back(data, mapped);
          job->wait();
        });
        break;
      case Registering::threads_each: {
        const auto chunks = registration_chunks(mapped, chunk_bytes, page);
        registration->push_back(pinned_registration::in_parts(data, mapped, inputs.threads));
        pinned_registration& parts = registration->back();
        phases["register_s"] = seconds_of([&] {
          detail::fill_job job(chunks.size(), 1, 1, inputs.threads, [&](std::size_t first, std::size_t last) {
            for (std::size_t i = first; i < last; ++i) {
              detail::fault_in(data + chunks[i].offset, chunks[i].bytes, detail::fault_method::touch);
              parts.add(chunks[i]);
            }
          });
          job.wait();
        });
        break;
      }
    }
  } catch (const pinning_error& error) {
    registration->clear();
    (void)os::release(mapping.address, mapping.size_bytes);
    refused("to pin " + human_size(mapped), error.what());
  }
  std::size_t pieces = 0, smallest = mapped;
  for (const auto& r : *registration) {
    pieces += r.chunks();
    smallest = std::min(smallest, r.bytes() / std::max<std::size_t>(r.chunks(), 1));
  }
  PinnedMemory made{data, smallest, pieces, os::page_kind_name(kind), nullptr};
  if (registering == Registering::threads_after || registering == Registering::threads_each) {
    made.copy_piece = std::min(chunk_bytes, mapped);
    made.adjoining_bytes = mapped;
    made.release = [registration, mapping](json& release_phases) {
      // One span: each chunk unpinned, then unmapped by the thread that unpinned it. Where the OS
      // cannot unmap part of a mapping (Windows), the whole goes at the end, within the span.
      release_phases["free_s"] = seconds_of([&] {
        std::atomic<bool> whole_left{false};
        auto* base = static_cast<unsigned char*>(mapping.address);
        for (pinned_registration& r : *registration) {
          r.release([&](const registration_chunk& chunk) {
            if (!os::release(base + chunk.offset, chunk.bytes).ok()) whole_left = true;
          });
        }
        if (whole_left) (void)os::release(mapping.address, mapping.size_bytes);
      });
    };
  } else {
    made.release = [registration, mapping](json& release_phases) {
      release_phases["unregister_s"] = seconds_of([&] { registration->clear(); });
      release_phases["free_s"] = seconds_of([&] { (void)os::release(mapping.address, mapping.size_bytes); });
    };
  }
  return made;
}

// cudaHostAlloc's way: the driver maps, faults in and pins in one call.
PinnedMemory driver_host_alloc(const WayInputs& inputs, json& phases) {
  void* data = nullptr;
  std::string error;
  phases["allocate_s"] = seconds_of([&] { error = inputs.driver.host_alloc(inputs.bytes, &data); });
  if (!error.empty()) refused("cuMemHostAlloc of " + human_size(inputs.bytes), error);
  detail::cuda_driver* driver = &inputs.driver;
  return PinnedMemory{static_cast<unsigned char*>(data), inputs.bytes, 1, "driver's", [driver, data](json& release_phases) {
                        release_phases["free_s"] = seconds_of([&] { driver->free_host(data); });
                      }};
}

// The driver's allocation in chunks, asked for from every thread at once (vLLM's and LMCache's way).
PinnedMemory driver_host_alloc_in_chunks(const WayInputs& inputs, json& phases) {
  const std::size_t count = (inputs.bytes + inputs.host_alloc_chunk - 1) / inputs.host_alloc_chunk;
  auto chunks = std::make_shared<std::vector<void*>>(count, nullptr);
  std::vector<std::string> errors(count);
  detail::cuda_driver* driver = &inputs.driver;
  const auto release = [driver, chunks](json& release_phases) {
    release_phases["free_s"] = seconds_of([&] {
      for (void* chunk : *chunks) {
        if (chunk) driver->free_host(chunk);
      }
    });
  };
  phases["allocate_s"] = seconds_of([&] {
    detail::fill_job job(count, 1, 1, inputs.threads, [&](std::size_t first, std::size_t last) {
      for (std::size_t i = first; i < last; ++i) {
        const std::size_t bytes = std::min(inputs.host_alloc_chunk, inputs.bytes - i * inputs.host_alloc_chunk);
        errors[i] = driver->host_alloc(bytes, &(*chunks)[i]);
      }
    });
    job.wait();
  });
  for (const std::string& error : errors) {
    if (error.empty()) continue;
    json ignored;
    release(ignored);
    refused("cuMemHostAlloc of " + human_size(inputs.host_alloc_chunk), error);
  }
  const std::size_t first_chunk = std::min(inputs.bytes, inputs.host_alloc_chunk);  // copies stay inside it
  PinnedMemory made{static_cast<unsigned char*>((*chunks)[0]), first_chunk, count, "driver's", release};
  made.contiguous_bytes = first_chunk;
  return made;
}

// malloc, then one registration: the driver faults every page in itself, on one thread.
PinnedMemory malloc_then_register(const WayInputs& inputs, json& phases) {
  void* data = nullptr;
  phases["allocate_s"] = seconds_of([&] { data = std::malloc(inputs.bytes); });
  if (!data) throw ProbeError(exit_not_enough_memory, "no_memory", "malloc of " + human_size(inputs.bytes) + " failed");
  auto registration = std::make_shared<pinned_registration>();
  try {
    phases["register_s"] = seconds_of([&] { *registration = pinned_registration(data, inputs.bytes); });
  } catch (const pinning_error& error) {
    std::free(data);
    refused("to pin " + human_size(inputs.bytes), error.what());
  }
  return PinnedMemory{static_cast<unsigned char*>(data), std::min(inputs.bytes, max_registration_bytes),
                      registration->chunks(), "malloc's", [registration, data](json& release_phases) {
                        release_phases["unregister_s"] = seconds_of([&] { registration->release(); });
                        release_phases["free_s"] = seconds_of([&] { std::free(data); });
                      }};
}

// The library's own way, as a program calls it: one registration, or (chunk_bytes) one per chunk.
PinnedMemory make_big_array_pinned(const WayInputs& inputs, json& phases, std::size_t chunk_bytes = 0) {
  auto array = std::make_shared<big_array<unsigned char>>();
  double made_s = 0;
  try {
    made_s = seconds_of([&] {
      *array = make_big_array<unsigned char>(inputs.bytes, uninitialized,
                                             {.threads = inputs.threads, .pinned = true, .pin_chunk_bytes = chunk_bytes});
    });
  } catch (const pinning_error& error) {
    refused("to pin " + human_size(inputs.bytes), error.what());
  }
  // The library times the registration, which overlaps the fault-in; the rest of the call mapped the
  // memory and chose how to fault it in.
  phases["register_s"] = array->report().pin_seconds;
  phases["fault_s"] = made_s - array->report().pin_seconds;
  const std::size_t chunks = std::max<std::size_t>(array->report().pinned_chunks, 1);
  PinnedMemory made{array->data(), chunk_bytes ? std::min(chunk_bytes, inputs.bytes) : std::min(inputs.bytes, max_registration_bytes),
                    chunks, array->report().page_kind, [array](json& release_phases) {
                      release_phases["free_s"] = seconds_of([&] { *array = big_array<unsigned char>(); });
                    }};
  if (chunks > 1) made.adjoining_bytes = array->report().mapped_bytes;
  return made;
}

// The copy's control: ordinary memory, faulted in by every thread and never pinned.
PinnedMemory unpinned_control(const WayInputs& inputs, json& phases) {
  void* data = nullptr;
  phases["allocate_s"] = seconds_of([&] { data = std::malloc(inputs.bytes); });
  if (!data) throw ProbeError(exit_not_enough_memory, "no_memory", "malloc of " + human_size(inputs.bytes) + " failed");
  phases["fault_s"] = seconds_of([&] {
    start_touch(static_cast<unsigned char*>(data), inputs.bytes / os::base_page_size() * os::base_page_size(),
                os::base_page_size(), inputs.threads)->wait();
  });
  return PinnedMemory{static_cast<unsigned char*>(data), inputs.bytes, 0, "malloc's", [data](json& release_phases) {
                        release_phases["free_s"] = seconds_of([&] { std::free(data); });
                      }};
}

// A way of mapped_and_registered's, for one page kind.
Way mapped_way(std::string name, os::PageKind kind, Registering registering, std::size_t chunk_bytes = 0) {
  return {std::move(name), true, [kind, registering, chunk_bytes](const WayInputs& inputs, json& phases) {
            return mapped_and_registered(inputs, phases, kind, registering, chunk_bytes);
          }};
}

std::vector<Way> all_ways(unsigned threads, std::size_t host_alloc_chunk, const std::vector<std::size_t>& register_chunks) {
  const std::string cpus = std::to_string(threads) + "-thread";
  std::vector<Way> ways{
      {"cuMemHostAlloc (cudaHostAlloc)", true, driver_host_alloc},
      {"cuMemHostAlloc, " + human_size(host_alloc_chunk) + " chunks from " + std::to_string(threads) + " threads", true,
       driver_host_alloc_in_chunks},
      {"malloc + cuMemHostRegister (the driver faults the pages in)", true, malloc_then_register},
      mapped_way("mmap base pages + " + cpus + " touch + register", os::PageKind::base, Registering::after),
      mapped_way("mmap + MADV_HUGEPAGE + " + cpus + " touch + register", os::PageKind::thp, Registering::after),
      mapped_way("hugetlb 2 MB + " + cpus + " touch + register", os::PageKind::huge_2mb, Registering::after),
      mapped_way("mmap + MADV_HUGEPAGE, touch and register overlapped", os::PageKind::thp, Registering::overlapped),
      mapped_way("mmap + MADV_HUGEPAGE, one registration following the " + cpus + " touch", os::PageKind::thp,
                 Registering::following),
  };
  for (const std::size_t chunk : register_chunks) {
    const std::string size = human_size(chunk), each = std::to_string(threads) + " threads";
    ways.push_back(mapped_way("mmap + MADV_HUGEPAGE + " + cpus + " touch, then " + size + " chunks registered by " + each,
                              os::PageKind::thp, Registering::threads_after, chunk));
    ways.push_back(mapped_way("mmap + MADV_HUGEPAGE, " + each + " each touch a " + size + " chunk and register it",
                              os::PageKind::thp, Registering::threads_each, chunk));
  }
  ways.push_back({"make_big_array pinned (memcost)", true, [](const WayInputs& inputs, json& phases) {
                    return make_big_array_pinned(inputs, phases);
                  }});
  for (const std::size_t chunk : register_chunks) {
    ways.push_back({"make_big_array pinned in " + human_size(chunk) + " registrations (memcost, copies within one)", true,
                    [chunk](const WayInputs& inputs, json& phases) { return make_big_array_pinned(inputs, phases, chunk); }});
  }
  ways.push_back({"malloc + " + cpus + " touch, not pinned (the copy's control)", false, unpinned_control});
  return ways;
}

// Copies of the first `copy_bytes` to the GPU (at most one block of the way's memory), in pieces no
// larger than one registration, three times: their median GB/s.
double copy_gb_per_s(detail::cuda_driver& driver, unsigned long long device, const PinnedMemory& made, std::size_t copy_bytes) {
  if (made.contiguous_bytes) copy_bytes = std::min(copy_bytes, made.contiguous_bytes);
  std::vector<double> gb_per_s;
  for (int copy = 0; copy < 3; ++copy) {
    std::string error;
    const double s = seconds_of([&] {
      for (std::size_t done = 0; done < copy_bytes && error.empty();) {
        const std::size_t piece = std::min(made.copy_piece, copy_bytes - done);
        error = driver.copy_to_device(device + done, made.data + done, piece);
        done += piece;
      }
    });
    if (!error.empty()) refused("a copy to the GPU", error);
    gb_per_s.push_back(static_cast<double>(copy_bytes) / s / 1e9);
  }
  std::sort(gb_per_s.begin(), gb_per_s.end());
  return gb_per_s[1];
}

// Why the hugetlb way cannot run (too few free pages in the pool), or "".
std::string hugetlb_missing(std::size_t bytes) {
  const std::size_t page = std::size_t{2} << 20, needed = (bytes + page - 1) / page;
  for (const auto& pool : os::hugetlb_pools()) {
    if (pool.page_size_bytes == page && pool.free_pages >= needed) return "";
    if (pool.page_size_bytes == page) {
      return "the 2 MB hugetlb pool has " + std::to_string(pool.free_pages) + " free pages of the " +
             std::to_string(needed) + " needed (memcost pinned --reserve-hugepages " + flag_size(needed * page) + ")";
    }
  }
  return "this kernel has no 2 MB hugetlb pool";
}

void declare(CLI::App& command, Settings& settings) {
  add_size_option(command, "--size", settings.size, "1G", "bytes to pin (capped by the budget unless given)");
  add_size_option(command, "--copy-size", settings.copy_size, "1G", "bytes copied to the GPU from each way's memory (at most --size)");
  add_size_option(command, "--host-alloc-chunk", settings.host_alloc_chunk, "1G", "the chunk of the chunked cuMemHostAlloc way");
  command.add_option("--register-chunks", settings.register_chunks,
                     "chunk sizes of the ways that register from every thread (default: 256M, under the driver's "
                     "512 MiB table, and --size over the threads)")
      ->delimiter(',');
  command.add_option("--ways", settings.ways_filter, "only the ways whose names contain one of these")->delimiter(',');
  command.add_option("--rounds", settings.rounds, "rounds: every way once a round, in an order shuffled each round")
      ->check(CLI::Range(1, 50));
  command.add_option("--threads", settings.threads, "threads that fault memory in (default 0: all CPUs)");
  command.add_option("--budget", settings.budget, "memory budget (default 80% of available memory)");
  command.add_option("--order-seed", settings.order_seed, "seed of the order the ways run in, shuffled each round");
}

// The chunk sizes the threaded registrations are measured at: --register-chunks, or 256 MiB (below
// 512 MiB, where NVIDIA's driver makes its page table one 2 MiB allocation that can stall in
// compaction) and one chunk a thread; on 2 MiB borders, smaller than the memory, each once.
std::vector<std::size_t> register_chunk_sizes(const Settings& settings, unsigned threads, std::size_t bytes) {
  const std::size_t huge = std::size_t{2} << 20;
  std::vector<std::size_t> sizes;
  if (settings.register_chunks.empty()) {
    sizes = {std::size_t{256} << 20, (bytes + threads - 1) / threads};
  } else {
    for (const std::string& text : settings.register_chunks) sizes.push_back(parse_size(text, "--register-chunks"));
  }
  std::vector<std::size_t> chosen;
  for (std::size_t size : sizes) {
    size = (size + huge - 1) / huge * huge;
    if (size >= bytes) continue;  // one chunk: the way that registers after faulting, from one thread
    if (std::find(chosen.begin(), chosen.end(), size) == chosen.end()) chosen.push_back(size);
  }
  return chosen;
}

std::vector<Way> chosen_ways(const Settings& settings, unsigned threads, std::size_t bytes, Emitter& emitter) {
  std::vector<Way> chosen;
  for (Way& way : all_ways(threads, settings.host_alloc_chunk, register_chunk_sizes(settings, threads, bytes))) {
    const bool wanted = settings.ways_filter.empty() || std::any_of(settings.ways_filter.begin(), settings.ways_filter.end(), [&](const std::string& part) {
                          return way.name.find(part) != std::string::npos;
                        });
    if (!wanted) continue;
    if (way.name.starts_with("hugetlb")) {
      if (std::string missing = hugetlb_missing(bytes); !missing.empty()) {
        emitter.warning("way_skipped", way.name + " is left out: " + missing);
        continue;
      }
    }
    chosen.push_back(std::move(way));
  }
  if (chosen.empty()) throw ProbeError(exit_bad_arguments, "bad_arguments", "--ways matches no way");
  return chosen;
}

struct Run {
  detail::cuda_driver* driver = nullptr;
  unsigned long long device_buffer = 0;
  std::vector<bool> failed;
  bool crossing_refused = false;  // said once
};

void measure_way(Emitter& emitter, Run& run, const Way& way, std::size_t index, const WayInputs& inputs, std::size_t copy_bytes,
                 int round) {
  if (run.failed[index]) return;
  json phases = {{"allocate_s", nullptr}, {"fault_s", nullptr}, {"register_s", nullptr}, {"unregister_s", nullptr}, {"free_s", nullptr}};
  const auto before = measure::take_snapshot({.machine = false});
  PinnedMemory made;
  try {
    made = way.make(inputs, phases);
  } catch (const ProbeError& error) {
    if (error.code() != "driver_refused" && error.code() != "map_failed") throw;
    run.failed[index] = true;
    emitter.warning("way_failed", way.name + ": " + error.what());
    return;
  }
  const auto made_at = measure::take_snapshot({.machine = false});
  const double copy = copy_gb_per_s(*run.driver, run.device_buffer, made, copy_bytes);
  // Where the memory is registered in chunks side by side, one copy that crosses from one into the
  // next: whether the driver copies across two registrations at pinned speed decides whether
  // chunked registration can serve an array that is copied whole.
  std::optional<double> across;
  bool across_refused = false;
  if (made.adjoining_bytes > made.copy_piece && made.registrations > 1) {
    const std::size_t length = std::min(copy_bytes, made.adjoining_bytes), page = os::base_page_size();
    const std::size_t start = made.copy_piece > length / 2 ? (made.copy_piece - length / 2) / page * page : 0;
    PinnedMemory crossing = made;  // the first border in its middle
    crossing.data += start;
    crossing.copy_piece = std::min(length, made.adjoining_bytes - start);
    try {
      across = copy_gb_per_s(*run.driver, run.device_buffer, crossing, crossing.copy_piece);
    } catch (const ProbeError& error) {  // the driver may refuse a copy over two registrations: a finding, not a failure
      if (error.code() != "driver_refused") throw;
      if (!run.crossing_refused) emitter.warning("copy_across_refused", way.name + ": " + error.what());
      run.crossing_refused = true;
      across_refused = true;
    }
  }
  made.release(phases);
  const auto interval = measure::between(before, made_at);
  double ready_s = 0;
  for (const char* phase : {"allocate_s", "fault_s", "register_s"}) {
    if (phases[phase].is_number()) ready_s += phases[phase].get<double>();
  }
  json metrics = phases;
  metrics["ready_s"] = ready_s;
  metrics["copy_gb_per_s"] = copy;
  metrics["copy_across_registrations_gb_per_s"] = across ? json(*across) : json(nullptr);
  metrics["copy_across_refused"] = across_refused;
  metrics["registrations"] = made.registrations;
  metrics["page_kind"] = made.page_kind;
  metrics["minor_faults"] = interval.faults_counted ? json(interval.minor_faults) : json(nullptr);
  emitter.sample({{"part", "way"}, {"way", way.name}, {"pinned", way.pinned}, {"size_bytes", inputs.bytes}, {"round", round},
                  {"threads", inputs.threads}},
                 std::move(metrics));
}

std::vector<Step> plan(const Settings& settings, bool size_given, Emitter& emitter) {
  std::string why_not;
  detail::cuda_driver* driver = detail::cuda_driver::get(why_not);
  if (!driver) throw ProbeError(exit_unsupported, "no_gpu", why_not);
  const BudgetChoice budget = choose_budget(settings.budget);
  const std::size_t bytes = size_within_budget(settings.size, size_given, budget, emitter, "pinning");
  if (bytes < (std::size_t{2} << 20)) throw ProbeError(exit_bad_arguments, "bad_arguments", "--size must be 2M or more");
  const std::size_t copy_bytes = std::min(settings.copy_size, bytes);
  const unsigned threads = settings.threads ? settings.threads : os::logical_cpu_count();
  auto ways = std::make_shared<std::vector<Way>>(chosen_ways(settings, threads, bytes, emitter));
  auto run = std::make_shared<Run>();
  run->driver = driver;
  run->failed.assign(ways->size(), false);

  std::vector<Step> steps;
  steps.push_back({"the GPU", [&emitter, run, copy_bytes, bytes] {
    if (std::string error = run->driver->device_alloc(copy_bytes, &run->device_buffer); !error.empty()) {
      refused("a buffer of " + human_size(copy_bytes) + " on the GPU", error);
    }
    const char* library = std::getenv("MEMCOST_CUDA_LIBRARY");
    emitter.sample({{"part", "device"}},
                   {{"name", run->driver->device_name()}, {"driver_library", library && *library ? library : os::cuda_driver_library()},
                    {"copy_bytes", copy_bytes}, {"size_bytes", bytes}});
  }});
  const auto order = interleaved_order(ways->size(), settings.rounds, settings.order_seed);
  for (int round = 0; round < settings.rounds; ++round) {
    for (std::size_t position = 0; position < ways->size(); ++position) {
      const std::size_t index = order[static_cast<std::size_t>(round)][position];
      steps.push_back({(*ways)[index].name + " (round " + std::to_string(round + 1) + ")",
                       [&emitter, run, ways, index, bytes, threads, copy_bytes, round, chunk = settings.host_alloc_chunk] {
                         const WayInputs inputs{*run->driver, bytes, threads, chunk};
                         measure_way(emitter, *run, (*ways)[index], index, inputs, copy_bytes, round);
                       }});
    }
  }
  steps.push_back({"done", [run] { run->driver->device_free(run->device_buffer); }});
  return steps;
}

}  // namespace

Experiment pinned_experiment() {
  return {"pinned", "Every way to pin host memory for a GPU, each phase timed, and the copy to the GPU from each",
          [](CLI::App& command) -> Runner {
            auto settings = std::make_shared<Settings>();
            declare(command, *settings);
            return [settings, &command](Emitter& emitter) {
              run_plan(emitter, plan(*settings, command.count("--size") > 0, emitter));
            };
          }};
}

}  // namespace memcost::probe
