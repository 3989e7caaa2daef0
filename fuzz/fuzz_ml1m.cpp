// fuzz_ml1m.cpp — libFuzzer target: the MovieLens-1M (ratings.dat, users.dat, movies.dat) reader,
// then preprocessing. Input: the files' contents separated by "\n@@@@\n" lines, in this order.
#include "fuzz_raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hstu::fuzz::fuzz_raw_reader(data, size, "ml-1m", {"ratings.dat", "users.dat", "movies.dat"});
  return 0;
}
