// fuzz_amazon.cpp — libFuzzer target: the Amazon Books (one headerless CSV) reader, then
// preprocessing. Input: the files' contents separated by "\n@@@@\n" lines, in this order.
#include "fuzz_raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hstu::fuzz::fuzz_raw_reader(data, size, "amzn-books", {"ratings_Books.csv"}, true);
  return 0;
}
