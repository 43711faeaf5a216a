#include "probe/arguments.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "probe/emitter.hpp"

namespace memcost::probe {

std::size_t parse_size(const std::string& text, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return ProbeError(exit_bad_arguments, "bad_arguments", flag + " '" + text + "': " + why);
  };
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) throw bad("not a size; write e.g. 4096, 64K, 8M, 1G");
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : unit == "T" ? 40 : -1;
  if (shift < 0) throw bad("unknown unit; use K, M, G or T");
  if (digits > 15) throw bad("too large");
  std::uint64_t value = std::stoull(text.substr(0, digits));
  if (value == 0) throw bad("must be at least one byte");
  if (value > (std::uint64_t{1} << (62 - shift))) throw bad("too large");
  return static_cast<std::size_t>(value << shift);
}

namespace {

// CLI11 transformer: a size's text into its bytes, before CLI11 converts it to a number; "0" kept
// where zero means "none" (`zero_means_none`).
CLI::Validator size_text(const std::string& flag, bool zero_means_none = false) {
  return CLI::Validator(
      [flag, zero_means_none](std::string& text) -> std::string {
        if (zero_means_none && text == "0") return "";
        try {
          text = std::to_string(parse_size(text, flag));
          return "";
        } catch (const ProbeError& error) {
          return error.what();
        }
      },
      "SIZE");
}

}  // namespace

CLI::Option* add_size_option(CLI::App& command, const std::string& flag, std::size_t& target,
                             const std::string& default_text, const std::string& help, bool zero_means_none) {
  return command.add_option(flag, target, help)->transform(size_text(flag, zero_means_none))->default_str(default_text);
}

CLI::Option* add_sizes_option(CLI::App& command, const std::string& flag, std::vector<std::size_t>& target,
                              const std::string& default_text, const std::string& help) {
  return command.add_option(flag, target, help)->delimiter(',')->transform(size_text(flag))->default_str(default_text);
}

CLI::Option* add_names_option(CLI::App& command, const std::string& flag, std::vector<std::string>& target,
                              const std::vector<std::string>& allowed, const std::string& help) {
  std::string shown;
  for (const auto& name : target) shown += (shown.empty() ? "" : ",") + name;
  return command.add_option(flag, target, help)->delimiter(',')->check(CLI::IsMember(allowed))->default_str(shown);
}

CLI::Option* add_page_kinds_option(CLI::App& command, const std::string& flag, std::vector<os::PageKind>& target,
                                   const std::string& help) {
  std::vector<std::pair<std::string, os::PageKind>> kinds;
  std::string shown;
  for (os::PageKind kind : {os::PageKind::base, os::PageKind::thp, os::PageKind::huge_2mb, os::PageKind::huge_1gb}) {
    kinds.emplace_back(os::page_kind_name(kind), kind);
  }
  for (os::PageKind kind : target) shown += (shown.empty() ? "" : ",") + std::string(os::page_kind_name(kind));
  return command.add_option(flag, target, help)->delimiter(',')->transform(named(kinds, "page kind"))->default_str(shown);
}

void run_plan(Emitter& emitter, const std::vector<Step>& plan) {
  emitter.progress(0, plan.size(), "start");
  for (std::size_t done = 0; done < plan.size(); ++done) {
    plan[done].run();
    emitter.progress(done + 1, plan.size(), plan[done].label);
  }
}

std::string human_size(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), value == std::floor(value) ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::string flag_size(std::uint64_t bytes) {
  for (auto [unit, shift] : {std::pair{'T', 40}, std::pair{'G', 30}, std::pair{'M', 20}, std::pair{'K', 10}}) {
    if (bytes % (std::uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes);
}

BudgetChoice choose_budget(const std::string& budget_flag_value) {
  measure::Budget budget = measure::memory_budget();
  BudgetChoice choice{budget.budget_bytes, budget.usable_bytes, false};
  if (!budget_flag_value.empty()) {
    choice.budget_bytes = parse_size(budget_flag_value, "--budget");
    choice.from_flag = true;
    if (choice.budget_bytes > budget.usable_bytes) {
      throw ProbeError(exit_not_enough_memory, "over_budget",
                       "--budget " + human_size(choice.budget_bytes) + " is more than the " + human_size(budget.usable_bytes) +
                           " of memory available now; pass a smaller --budget");
    }
  }
  return choice;
}

void require_within_budget(std::uint64_t bytes, const BudgetChoice& budget, const std::string& what) {
  if (bytes <= budget.budget_bytes) return;
  std::string source = budget.from_flag ? "set by --budget" : "80 % of the " + human_size(budget.usable_bytes) + " available";
  throw ProbeError(exit_not_enough_memory, "over_budget",
                   what + " needs " + human_size(bytes) + ", over the memory budget of " + human_size(budget.budget_bytes) +
                       " (" + source + "); ask for less, or pass --budget SIZE to change the budget");
}

std::size_t size_within_budget(std::size_t asked, bool given, const BudgetChoice& budget, Emitter& emitter,
                               const std::string& doing) {
  if (asked <= budget.budget_bytes) return asked;
  if (given) require_within_budget(asked, budget, "--size " + flag_size(asked));
  const std::size_t capped = budget.budget_bytes / (1 << 30) * (1 << 30);
  emitter.warning("size_over_budget", human_size(asked) + " is over the memory budget of " + human_size(budget.budget_bytes) +
                                          "; " + doing + " " + human_size(capped) + " instead");
  return capped;
}

}  // namespace memcost::probe
