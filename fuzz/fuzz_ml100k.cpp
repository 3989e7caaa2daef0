// fuzz_ml100k.cpp — libFuzzer target: the MovieLens-100K (u.data, u.item) reader, then
// preprocessing. Input: the files' contents separated by "\n@@@@\n" lines, in this order.
#include "fuzz_raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hstu::fuzz::fuzz_raw_reader(data, size, "ml-100k", {"u.data", "u.item"});
  return 0;
}
