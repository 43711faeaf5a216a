// The values experiments take, typed for CLI11 (sizes, names, page kinds), the plan of a run, and the memory budget.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::probe {

// "4096", "64K", "8M", "1G" (binary units). Throws ProbeError (exit 2) naming `flag`.
[[nodiscard]] std::size_t parse_size(const std::string& text, const std::string& flag);
// "8 MiB", "1.5 GiB".
[[nodiscard]] std::string human_size(std::uint64_t bytes);
// As a flag takes it: "8M", "1G", "264752".
[[nodiscard]] std::string flag_size(std::uint64_t bytes);

// ---- typed options: parsed, checked and converted by CLI11, so no runner handles strings ----

// A size ("64K", "8M", "1G", or bytes) into `target`, shown with `default_text`.
CLI::Option* add_size_option(CLI::App& command, const std::string& flag, std::size_t& target,
                             const std::string& default_text, const std::string& help,
                             bool zero_means_none = false);
// A comma-separated list of sizes.
CLI::Option* add_sizes_option(CLI::App& command, const std::string& flag, std::vector<std::size_t>& target,
                              const std::string& default_text, const std::string& help);
// A comma-separated list of names, each one of `allowed`.
CLI::Option* add_names_option(CLI::App& command, const std::string& flag, std::vector<std::string>& target,
                              const std::vector<std::string>& allowed, const std::string& help);
// A name into its enum value, with one clear line when the name is unknown ("an unknown route
// 'x'; use os, malloc or new"); for options whose target is an enum.
template <class Enum>
CLI::Validator named(const std::vector<std::pair<std::string, Enum>>& names, const std::string& what) {
  std::string choices;
  for (const auto& [name, value] : names) choices += (choices.empty() ? "" : ", ") + name;
  return CLI::Validator(
      [names, what, choices](std::string& text) -> std::string {
        for (const auto& [name, value] : names) {
          if (text == name) {
            text = std::to_string(static_cast<int>(value));
            return "";
          }
        }
        return "'" + text + "' is not a " + what + "; use " + choices;
      },
      what);
}

// A comma-separated list of page kinds (base, thp, hugetlb-2M, hugetlb-1G).
CLI::Option* add_page_kinds_option(CLI::App& command, const std::string& flag, std::vector<os::PageKind>& target,
                                   const std::string& help);

// ---- a plan: the steps of a run, listed before any runs, so that the progress total is the list's length ----

struct Step {
  std::string label;
  std::function<void()> run;
};
class Emitter;
// Runs every step, reporting progress after each.
void run_plan(Emitter& emitter, const std::vector<Step>& plan);

// The budget in force: --budget when given (it may not exceed the usable
// memory), otherwise 80 % of the usable memory.
struct BudgetChoice {
  std::uint64_t budget_bytes = 0;
  std::uint64_t usable_bytes = 0;
  bool from_flag = false;
};
[[nodiscard]] BudgetChoice choose_budget(const std::string& budget_flag_value);
// Throws ProbeError (exit 3) when `bytes` at once would exceed the budget.
void require_within_budget(std::uint64_t bytes, const BudgetChoice& budget, const std::string& what);
// The --size to use: the one asked for; over the budget, exit 3 when it was `given`, else the budget
// rounded down to whole GiB, said in a warning ("...; <doing> 18 GiB instead").
[[nodiscard]] std::size_t size_within_budget(std::size_t asked, bool given, const BudgetChoice& budget, Emitter& emitter,
                                             const std::string& doing);

}  // namespace memcost::probe
