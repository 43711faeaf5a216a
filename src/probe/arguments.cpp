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

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  for (char c : text + ",") {
    if (c == ',') {
      if (!item.empty()) items.push_back(item);
      item.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      item += c;
    }
  }
  return items;
}

std::vector<std::size_t> parse_sizes(const std::string& text, const std::string& flag) {
  std::vector<std::size_t> sizes;
  for (const auto& item : split_list(text)) sizes.push_back(parse_size(item, flag));
  if (sizes.empty()) throw ProbeError(exit_bad_arguments, "bad_arguments", flag + " needs at least one size, e.g. 8M,32M");
  return sizes;
}

std::vector<os::PageKind> parse_page_kinds(const std::string& text, const std::string& flag) {
  std::vector<os::PageKind> kinds;
  for (const auto& item : split_list(text)) {
    auto kind = os::page_kind_from_name(item);
    if (!kind) {
      throw ProbeError(exit_bad_arguments, "bad_arguments",
                       flag + " '" + item + "': unknown page kind; use base, thp, hugetlb-2M or hugetlb-1G");
    }
    kinds.push_back(*kind);
  }
  if (kinds.empty()) throw ProbeError(exit_bad_arguments, "bad_arguments", flag + " needs at least one page kind");
  return kinds;
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

}  // namespace memcost::probe
