// A tracer sink for the tracer's unit tests: keeps every record it is given.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "trace/tracer.hpp"

namespace memcost::trace {

class CollectingSink : public Sink {
 public:
  void stack(std::uint32_t id, const std::vector<Frame>& frames) override { stacks[id] = frames; }
  void call(const MappingCall& call) override { calls.push_back(call); }
  void fault(const Fault& fault) override { faults.push_back(fault); }
  void process(const ProcessEvent& event) override { processes.push_back(event); }
  void settle(std::uint64_t until_ns) override { settled = until_ns; }
  void call_faults(const CallFaults& taken) override { faults_in_calls.push_back(taken); }
  void region_faults(const RegionFaults& counts) override { regions.push_back(counts); }
  void same_stack(std::uint32_t alias, std::uint32_t stack) override { same[alias] = stack; }

  std::map<std::uint32_t, std::vector<Frame>> stacks;
  std::map<std::uint32_t, std::uint32_t> same;  // same_stack: alias -> stack
  std::vector<MappingCall> calls;
  std::vector<Fault> faults;
  std::vector<ProcessEvent> processes;
  std::vector<CallFaults> faults_in_calls;
  std::vector<RegionFaults> regions;
  std::uint64_t settled = 0;
};

}  // namespace memcost::trace
