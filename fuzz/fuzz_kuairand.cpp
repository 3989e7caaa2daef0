// fuzz_kuairand.cpp — libFuzzer target: the KuaiRand-Pure (two standard logs, the user features)
// reader, then preprocessing. Input: the files' contents separated by "\n@@@@\n" lines, in this
// order.
#include "fuzz_raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hstu::fuzz::fuzz_raw_reader(data, size, "kuairand-pure",
                              {"log_standard_4_08_to_4_21_pure.csv",
                               "log_standard_4_22_to_5_08_pure.csv", "user_features_pure.csv"});
  return 0;
}
