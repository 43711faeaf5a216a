// `memcost-probe info`: the context line alone, which main() always prints first.
#include "probe/experiment.hpp"

namespace memcost::probe {

Experiment info_experiment() {
  return {"info", "Describe how this machine hands out memory (one context line)",
          [](CLI::App&) -> Runner { return [](Emitter&) {}; }};
}

}  // namespace memcost::probe
