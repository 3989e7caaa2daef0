// fuzz_ml_csv.cpp — libFuzzer target: the MovieLens CSV (ml-20m / ml-latest / ml-latest-small:
// ratings.csv, movies.csv) reader, then preprocessing. Input: the files' contents separated by
// "\n@@@@\n" lines, in this order.
#include "fuzz_raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hstu::fuzz::fuzz_raw_reader(data, size, "ml-latest-small", {"ratings.csv", "movies.csv"});
  return 0;
}
