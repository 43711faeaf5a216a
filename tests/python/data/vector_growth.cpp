// A C++ program that grows a std::vector<double> by push_back to 256 MiB (or, with "reserve",
// reserves it once first). Every big block is allocated inside the standard library's
// _M_realloc_insert; the function the program's author wrote is grow_samples.
#include <cstdio>
#include <cstring>
#include <vector>

__attribute__((noinline)) static double grow_samples(bool reserve) {
  std::vector<double> samples;
  const std::size_t count = (256UL << 20) / sizeof(double);
  if (reserve) samples.reserve(count);
  for (std::size_t i = 0; i < count; ++i) samples.push_back(static_cast<double>(i));
  return samples[count / 2];
}

int main(int argc, char** argv) {
  const bool reserve = argc > 1 && std::strcmp(argv[1], "reserve") == 0;
  std::printf("%f\n", grow_samples(reserve));
  return 0;
}
