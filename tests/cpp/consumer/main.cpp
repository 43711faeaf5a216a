#include <memcost/big_array.hpp>

#include <cstdio>

int main() {
  auto squares = memcost::make_big_array<long>(1 << 20, memcost::generate([](std::size_t i) { return long(i * i); }));
  std::printf("%s %ld\n", squares.report().page_kind.c_str(), squares[1000]);
  return squares[1000] == 1000000 ? 0 : 1;
}
