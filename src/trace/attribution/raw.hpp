// Raw records, kept only when asked for (`memcost trace --raw`): every call, fault and process
// change, as fixed-size little-endian binary records in a gzip stream, beside the results
// document whose stack records they refer to. About 30 bytes a fault before compression.
// replay() feeds them back to any sink, so the same attribution re-aggregates them.
//
// Format: the line "memcost-trace-raw 1\n", then records, each a kind byte and its fields:
//   'f' fault:   pid i32, tid i32, time_ns u64, address u64, stack u32, user_mode u8
//   'c' call:    kind u8, pid i32, tid i32, enter_ns u64, exit_ns u64, args u64[6], result i64, stack u32
//   'p' process: change u8, pid i32, parent i32, time_ns u64, name char[16] (NUL-padded)
#pragma once

#include <memory>
#include <string>

#include "trace/tracer.hpp"

namespace memcost::trace {

class RawWriter : public Sink {
 public:
  // Writes to `path` (replaced), passing every record on to `next`.
  RawWriter(const std::string& path, Sink& next);
  ~RawWriter() override;

  void stack(std::uint32_t id, const std::vector<Frame>& frames) override { next_.stack(id, frames); }
  void call(const MappingCall& call) override;
  void fault(const Fault& fault) override;
  void process(const ProcessEvent& event) override;
  void settle(std::uint64_t until_ns) override { next_.settle(until_ns); }
  // Not written: a replay names those calls by their own stacks (the same frames, apart sites).
  void same_stack(std::uint32_t alias, std::uint32_t stack) override { next_.same_stack(alias, stack); }
  // CPU samples are passed on, not kept: a replay has fault counts, not sampled fault time.
  void cpu_sample(const CpuSample& sample) override { next_.cpu_sample(sample); }
  // Counted in the kernel, which a raw trace is not (it records every fault): passed on.
  void region_faults(const RegionFaults& counts) override { next_.region_faults(counts); }

  // Empty when all is well; else what failed (the file could not be written).
  [[nodiscard]] std::string error() const { return error_; }
  // Flush and close; error() says whether everything reached the file.
  void close();

 private:
  void put(const void* bytes, std::size_t size);

  Sink& next_;
  void* file_ = nullptr;  // a zlib gzFile
  std::string path_, error_;
};

// Feeds a raw file's records to `sink` (then settle(UINT64_MAX)); false with `error` set when
// the file is not one, or is cut short.
bool replay(const std::string& path, Sink& sink, std::string& error);

}  // namespace memcost::trace
