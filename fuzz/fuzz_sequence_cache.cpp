// fuzz_sequence_cache.cpp — libFuzzer target: the preprocessed sequence cache reader
// (data/preprocess.h read_sequence_file: the mmapped sequences.bin and its validation); what it
// accepts is walked whole (every user's items, timestamps and actions).
#include "data/preprocess.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hstu::fuzz::write_file(
      "sequences.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  hstu::fuzz::expect_accept_or_error([&] {
    const hstu::SequenceDataset ds = hstu::read_sequence_file(path);
    volatile int64_t sum = 0;
    for (int64_t u = 0; u < ds.num_users(); ++u)
      for (int64_t e = ds.user_offsets[u]; e < ds.user_offsets[u + 1]; ++e)
        sum = sum + ds.items[e] + ds.timestamps[e] + (ds.actions.empty() ? 0 : ds.actions[e]);
    for (const int32_t v : ds.contextual_values) sum = sum + v;
  });
  return 0;
}
