// fuzz_trainer_state.cpp — libFuzzer target: io/json's parser on a checkpoint's
// trainer_state.json, then the typed reads the resume makes of it (task, step, epoch,
// batch_index, best_validation, selected_epoch, the evaluations and their metric objects), with
// the same accessors (json::int_at / double_at / string_at / array_at, which name the key).
#include "fuzz_util.h"
#include "io/json.h"

namespace {

void read_metrics(const hstu::Json& o) {
  HSTU_CHECK(o.is_object(), "metrics: not an object");
  for (const auto& [k, v] : o.items()) hstu::json::double_at(o, k);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  hstu::fuzz::expect_accept_or_error([&] {
    const hstu::Json st = hstu::json::parse(text, "trainer_state.json");
    if (st.contains("task")) hstu::json::string_at(st, "task");
    hstu::json::int_at(st, "step");
    hstu::json::int_at(st, "epoch");
    hstu::json::int_at(st, "batch_index");
    if (st.contains("best_validation")) hstu::json::double_at(st, "best_validation");
    if (st.contains("selected_epoch")) hstu::json::int_at(st, "selected_epoch");
    if (st.contains("selected_test")) read_metrics(hstu::json::at(st, "selected_test"));
    for (const hstu::Json& e : hstu::json::array_at(st, "evals")) {
      hstu::json::int_at(e, "epoch");
      hstu::json::int_at(e, "step");
      if (e.contains("validation")) read_metrics(hstu::json::at(e, "validation"));
      read_metrics(hstu::json::at(e, "test"));
    }
    hstu::json::dump(st, 2);  // and it writes back
  });
  return 0;
}
