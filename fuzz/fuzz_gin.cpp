// fuzz_gin.cpp — libFuzzer target: the gin config parser and the schema binding behind `hstu
// train CONFIG` (config/gin.h parse_text, config/load.h load_config_text).
#include "config/gin.h"
#include "config/load.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hstu::fuzz::expect_accept_or_error([&] { hstu::gin::parse_text(text, "<fuzz>"); });
  hstu::fuzz::expect_accept_or_error([&] { hstu::load_config_text(text, "<fuzz>", {}, nullptr); });
  return 0;
}
