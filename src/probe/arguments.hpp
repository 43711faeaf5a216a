// Parsing of the values experiments take: sizes, lists, the memory budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memcost/measure.hpp"
#include "os/os.hpp"

namespace memcost::probe {

// "4096", "64K", "8M", "1G" (binary units). Throws ProbeError (exit 2) naming `flag`.
[[nodiscard]] std::size_t parse_size(const std::string& text, const std::string& flag);
[[nodiscard]] std::vector<std::size_t> parse_sizes(const std::string& text, const std::string& flag);
[[nodiscard]] std::vector<std::string> split_list(const std::string& text);
[[nodiscard]] std::vector<os::PageKind> parse_page_kinds(const std::string& text, const std::string& flag);
// "8 MiB", "1.5 GiB".
[[nodiscard]] std::string human_size(std::uint64_t bytes);
// As a flag takes it: "8M", "1G", "264752".
[[nodiscard]] std::string flag_size(std::uint64_t bytes);

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

}  // namespace memcost::probe
