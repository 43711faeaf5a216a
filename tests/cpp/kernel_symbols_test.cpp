// The kernel's fault, zeroing and tracing ranges: read from /proc/kallsyms's text, and kept per
// boot in a file that is trusted only for the boot and kernel it names, whole and well formed
// (bytes another run left are checked like any other input: fuzzed under AddressSanitizer).
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>

#include "trace/unwind/kernel_symbols.hpp"

namespace memcost::trace::detail {
namespace {

const char* kKallsyms =
    "ffffffff81000000 T _stext\n"
    "ffffffff81001000 t asm_exc_page_fault\n"
    "ffffffff81001100 T exc_page_fault\n"
    "ffffffff81001400 T some_other_function\n"
    "ffffffff81002000 T clear_page_rep\n"
    "ffffffff81002040 T __perf_event_overflow\n"
    "ffffffff81002200 t bpf_trace_run2\n"
    "ffffffff81002300 D some_data\n"
    "ffffffff81002400 T last_function\n"
    "ffffffffc0001000 t bpf_prog_e24f4381485f2c07_on_user_fault\t[bpf]\n"
    "ffffffffc0002000 t module_function\t[kvm]\n";

TEST(KernelSymbols, RangesEndWhereTheNextTextSymbolBegins) {
  std::istringstream in(kKallsyms);
  const KernelTable table = kernel_table_from(in);
  EXPECT_EQ(table.fault, (KernelRanges{{0xffffffff81001000, 0xffffffff81001100}, {0xffffffff81001100, 0xffffffff81001400}}));
  EXPECT_EQ(table.zeroing, (KernelRanges{{0xffffffff81002000, 0xffffffff81002040}}));
  // perf's and the BPF glue's, not the JIT-compiled program's (its address changes at every load).
  EXPECT_EQ(table.tracing, (KernelRanges{{0xffffffff81002040, 0xffffffff81002200}, {0xffffffff81002200, 0xffffffff81002400}}));
}

TEST(KernelSymbols, HiddenAddressesGiveNoRanges) {
  std::istringstream in("0000000000000000 T exc_page_fault\n0000000000000000 T clear_page_rep\n");
  EXPECT_EQ(kernel_table_from(in), KernelTable{});
}

TEST(KernelSymbols, TheKeptTableIsReadBackForItsOwnBootOnly) {
  std::istringstream in(kKallsyms);
  const KernelTable table = kernel_table_from(in);
  const std::string text = kernel_table_text(table, "boot-a 6.18.0");
  std::istringstream same(text), other(text);
  EXPECT_EQ(kernel_table_parse(same, "boot-a 6.18.0"), table);
  EXPECT_EQ(kernel_table_parse(other, "boot-b 6.18.0"), std::nullopt);
}

TEST(KernelSymbols, AMalformedOrDisorderedKeptTableIsRefused) {
  const std::string header = "memcost kernel ranges 1 boot-a 6.18.0\n";
  for (const std::string body : {"f 10\n", "q 10 20\n", "f 20 10\n", "f 10 20 30\n", "f 10 20\nf 15 30\n", "f zz 20\n"}) {
    std::istringstream in(header + body);
    EXPECT_EQ(kernel_table_parse(in, "boot-a 6.18.0"), std::nullopt) << body;
  }
  std::istringstream empty("");
  EXPECT_EQ(kernel_table_parse(empty, "boot-a 6.18.0"), std::nullopt);
}

TEST(KernelSymbols, RandomBytesNeverCrashTheReaders) {
  std::mt19937 random(7);
  const std::string alphabet = "0123456789abcdefftzq \n\t[]memcostkernelranges";
  for (int round = 0; round < 2000; ++round) {
    std::string text = round % 2 ? "memcost kernel ranges 1 b r\n" : "";
    const auto length = random() % 200;
    for (unsigned i = 0; i < length; ++i) text += alphabet[random() % alphabet.size()];
    std::istringstream a(text), b(text);
    (void)kernel_table_parse(a, "b r");
    (void)kernel_table_from(b);
  }
}

}  // namespace
}  // namespace memcost::trace::detail
