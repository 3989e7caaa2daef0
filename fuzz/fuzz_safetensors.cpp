// fuzz_safetensors.cpp — libFuzzer target: the strict safetensors reader (io/safetensors.h) that
// loads checkpoints: header length, JSON header, dtypes, shapes, offsets, metadata; every tensor
// it accepts is read whole.
#include <numeric>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hstu::fuzz::write_file(
      "x.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  hstu::fuzz::expect_accept_or_error([&] {
    const hstu::SafetensorsFile f(path);
    volatile uint64_t sum = 0;
    for (const std::string& name : f.names()) {
      const auto& e = f.get(name);
      sum = sum + std::accumulate(e.bytes.begin(), e.bytes.end(), uint64_t(0)) +
            static_cast<uint64_t>(e.numel());
    }
    for (const auto& [k, v] : f.metadata()) sum = sum + k.size() + v.size();
  });
  return 0;
}
