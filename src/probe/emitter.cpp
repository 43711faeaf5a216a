#include "probe/emitter.hpp"

#include <cstdio>
#include <iostream>

namespace memcost::probe {

void Emitter::line(const json& object, bool may_wait) const {
  std::cout << json_text(object) << '\n';
  // Flushed per line, unless held, so that the reader sees progress as it happens.
  if (!(may_wait && holding_)) flush();
}

void Emitter::sample_text(std::string_view record, std::string_view metrics) const {
  std::cout << R"({"type":"sample","case":{"record":")" << record << R"("},"metrics":)" << metrics << "}\n";
  if (!holding_) flush();
}

void Emitter::flush() { std::cout.flush(); }

// A traced program's bytes need not be UTF-8 (a library at a path with a Latin-1 name): the json
// library's default threw on them, and the probe ended the trace with an error.
std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

void Emitter::context(json machine) {
  json object = {{"type", "context"}};
  object.update(machine);
  line(object);
}

void Emitter::progress(std::size_t done, std::size_t total, const std::string& label) {
  line({{"type", "progress"}, {"done", done}, {"total", total}, {"label", label}});
}

void Emitter::sample(json case_parameters, json metrics) {
  line({{"type", "sample"}, {"case", std::move(case_parameters)}, {"metrics", std::move(metrics)}}, true);
}

void Emitter::warning(const std::string& code, const std::string& message) {
  std::cerr << "memcost-probe: warning: " << message << '\n';
  line({{"type", "warning"}, {"code", code}, {"message", message}});
}

void Emitter::error(const std::string& code, const std::string& message) {
  std::cerr << "memcost-probe: error: " << message << '\n';
  line({{"type", "error"}, {"code", code}, {"message", message}});
}

}  // namespace memcost::probe
