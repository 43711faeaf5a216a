// memcost-probe: runs one experiment per invocation and speaks the JSON-lines
// protocol of DESIGN.md on stdout.
#include <exception>
#include <cstdio>
#include <iostream>

#include "os/os.hpp"
#include "probe/context.hpp"
#include "probe/emitter.hpp"
#include "probe/experiment.hpp"

using namespace memcost::probe;

namespace {

// Every flag of a command with the value it runs with: as given, or its default.
json settings_of(const CLI::App& command) {
  json values = json::object();
  for (const CLI::Option* option : command.get_options()) {
    const std::string name = option->get_single_name();
    if (name.empty() || name == "help" || option->get_positional()) continue;
    if (option->count() > 0) {
      const auto& given = option->results();
      std::string joined;
      for (const auto& item : given) joined += (joined.empty() ? "" : ",") + item;
      values[name] = joined;
    } else {
      values[name] = option->get_default_str();
    }
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  // Not fatal when unavailable: the probe only loses the guarantee, and says nothing on stdout.
  (void)memcost::os::exit_with_parent();
  static char stdout_buffer[Emitter::kStdoutBufferBytes];
  std::setvbuf(stdout, stdout_buffer, _IOFBF, sizeof(stdout_buffer));  // before anything is written
  Emitter emitter;
  CLI::App app{"memcost-probe: measures one memory experiment and prints JSON lines"};
  app.set_version_flag("--version", std::string(MEMCOST_VERSION));
  app.require_subcommand(1, 1);
  app.failure_message([](const CLI::App*, const CLI::Error& error) { return std::string(error.what()); });
  bool legacy_layout = false;
  app.add_flag("--legacy-layout", legacy_layout,
               "re-run the probe with the legacy bottom-up mmap layout (Linux ADDR_COMPAT_LAYOUT)");

  std::vector<Experiment> experiments = all_experiments();
  std::vector<std::pair<CLI::App*, Runner>> commands;
  for (Experiment& experiment : experiments) {
    CLI::App* command = app.add_subcommand(experiment.name, experiment.summary);
    // Defaults are shown in --help and written in the `settings` line: they live here only.
    command->option_defaults()->always_capture_default();
    commands.emplace_back(command, experiment.attach(*command));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return exit_ok;
  } catch (const CLI::CallForVersion&) {
    std::cout << MEMCOST_VERSION << '\n';
    return exit_ok;
  } catch (const CLI::ParseError& error) {
    std::string message = error.what();
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {
      message = std::string("unknown experiment '") + argv[1] + "'; run `memcost-probe --help` for the list";
    }
    emitter.error("bad_arguments", message);
    return exit_bad_arguments;
  }

  if (legacy_layout && !memcost::os::legacy_layout_active()) {
    // The layout is fixed when a program starts: set it, then start again.
    memcost::os::Status status = memcost::os::request_legacy_layout_for_exec();
    if (status.ok()) status = memcost::os::exec_self(argv);
    emitter.error("not_supported_here", "cannot switch to the legacy mmap layout: " + status.message());
    return exit_unsupported;
  }

  try {
    json context = machine_context();
    for (auto& [command, runner] : commands) {
      // The values the experiment runs with, given or default: its defaults live here only.
      json values = command->parsed() ? settings_of(*command) : json::object();
      if (!values.empty()) context["settings"] = values;
      // Names what the lines after it hold, so that a captured stream can be imported alone.
      if (command->parsed()) context["experiment"] = command->get_name();
    }
    emitter.context(std::move(context));
    for (auto& [command, runner] : commands) {
      if (command->parsed()) runner(emitter);
    }
    // All is said: the front end reads the end now, not after the trace's events have closed.
    std::cout.flush();
    memcost::os::release_stdout();
    return exit_ok;
  } catch (const ProbeError& error) {
    emitter.error(error.code(), error.what());
    return error.exit_code();
  } catch (const std::bad_alloc&) {
    emitter.error("out_of_memory", "the probe ran out of memory; lower the sizes or raise the budget");
    return exit_not_enough_memory;
  } catch (const std::exception& error) {
    emitter.error("failure", error.what());
    return exit_failure;
  }
}
