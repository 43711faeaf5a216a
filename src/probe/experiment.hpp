// How an experiment plugs into the probe: one file per experiment, each
// providing a function that returns its Experiment.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "probe/emitter.hpp"

namespace memcost::probe {

using Runner = std::function<void(Emitter&)>;

struct Experiment {
  std::string name;
  std::string summary;
  // Declares the experiment's flags on `command` and returns the function that
  // runs it once the flags are parsed.
  std::function<Runner(CLI::App& command)> attach;
};

Experiment info_experiment();
Experiment costs_experiment();
Experiment scaling_experiment();
Experiment bigarray_experiment();
Experiment hugepages_experiment();
Experiment trace_experiment();
Experiment monitor_experiment();
Experiment pinned_experiment();

// Every experiment the probe knows, in the order `memcost-probe --help` lists them.
inline std::vector<Experiment> all_experiments() {
  return {info_experiment(), costs_experiment(), scaling_experiment(), bigarray_experiment(), hugepages_experiment(),
          trace_experiment(), monitor_experiment(), pinned_experiment()};
}

}  // namespace memcost::probe
