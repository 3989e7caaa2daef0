// fuzz_trainer_state.cpp — libFuzzer target: io/json's parser on a checkpoint's
// trainer_state.json, then the resume's own reader of it, parse_trainer_state
// (train/train_loop.h: every field validated, errors naming the field), and, when it parses, the
// comparison of its stored config with a run's (train/resume_check.h), as a resume makes them.
#include "config/config.h"
#include "fuzz_util.h"
#include "io/json.h"
#include "train/resume_check.h"
#include "train/train_loop.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  hstu::fuzz::expect_accept_or_error([&] {
    const hstu::Json st = hstu::json::parse(text, "trainer_state.json");
    const hstu::TrainerState s = hstu::parse_trainer_state(st, "trainer_state.json");
    static const hstu::Config run;  // the defaults, as a run to compare with
    hstu::resume_differences(s, run, 1, "fingerprint", "trainer_state.json");
    hstu::json::dump(st, 2);  // and it writes back
  });
  return 0;
}
