// The probe protocol: one JSON object per line on stdout (see DESIGN.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace memcost::probe {

using json = nlohmann::ordered_json;

// Exit codes shared by the probe and the memcost command.
enum ExitCode : int {
  exit_ok = 0,
  exit_failure = 1,
  exit_bad_arguments = 2,
  exit_not_enough_memory = 3,
  exit_unsupported = 4,
  exit_interrupted = 130,  // SIGINT or SIGTERM before anything was recorded (trace), as a shell reports SIGINT
};

// A fault count as the protocol writes it: null where the OS counts no faults (Wine), never a 0 it did not measure.
[[nodiscard]] inline json fault_count(bool counted, std::uint64_t count) { return counted ? json(count) : json(nullptr); }

// A value as one line of the protocol's JSON. Bytes that are not UTF-8 (a traced program's: a
// library's path, a symbol) become U+FFFD, where the json library's default would throw.
[[nodiscard]] std::string json_text(const json& value);

// Thrown by an experiment to end the probe with an `error` line and an exit code.
class ProbeError : public std::runtime_error {
 public:
  ProbeError(ExitCode exit_code, std::string code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code), code_(std::move(code)) {}
  [[nodiscard]] ExitCode exit_code() const { return exit_code_; }
  [[nodiscard]] const std::string& code() const { return code_; }

 private:
  ExitCode exit_code_;
  std::string code_;
};

class Emitter {
 public:
  void context(json machine);
  // Call between timed regions only: writing a line costs a system call.
  void progress(std::size_t done, std::size_t total, const std::string& label);
  void sample(json case_parameters, json metrics);
  // A sample whose metrics its caller wrote as JSON text (one object): for the records a trace
  // sends by the thousand, built without a json tree each (JsonSink::stack).
  void sample_text(std::string_view record, std::string_view metrics) const;
  void warning(const std::string& code, const std::string& message);
  void error(const std::string& code, const std::string& message);

  // While one is alive, samples wait in stdout's buffer (kStdoutBufferBytes, set by main) until
  // flush() or until it is full: a trace sends thousands of stack lines, and a line written alone
  // costs a system call and a wake-up of the reader each. Every other line, and the end of the
  // holding, writes what waits first.
  class Holding {
   public:
    explicit Holding(Emitter& emitter) : emitter_(emitter) { emitter_.holding_ = true; }
    ~Holding() {
      emitter_.holding_ = false;
      emitter_.flush();
    }
    Holding(const Holding&) = delete;
    Holding& operator=(const Holding&) = delete;

   private:
    Emitter& emitter_;
  };
  static void flush();
  // stdout's buffer: a flush of held lines is one write then (stdio's own 4 KiB took three).
  static constexpr std::size_t kStdoutBufferBytes = std::size_t{1} << 20;

 private:
  void line(const json& object, bool may_wait = false) const;
  bool holding_ = false;
};

}  // namespace memcost::probe
