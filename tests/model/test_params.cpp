// test_params.cpp — DenseParams registration at scale: duplicate names are found in constant
// time (a model with a huge num_layers used to hang in a quadratic check), and a shape whose
// element count overflows is an error naming the parameter.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/params.h"

namespace hstu {
namespace {

TEST(DenseParams, ManyParametersRegisterQuickly) {
  DenseParams p;
  constexpr int kCount = 300000;  // ~4.5e10 name comparisons for the old linear find()
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(p.add("layer_" + std::to_string(i) + ".weight", {1}, true, Init::zeros()), i);
  }
  EXPECT_EQ(p.find("layer_123456.weight"), 123456);
  EXPECT_EQ(p.find("layer_x.weight"), -1);
  EXPECT_THROW(p.add("layer_7.weight", {1}, true, Init::zeros()), Error);
}

TEST(DenseParams, OverflowingShapeIsAnError) {
  DenseParams p;
  try {
    p.add("huge", {int64_t{1} << 40, int64_t{1} << 40}, true, Init::zeros());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "size overflow: huge = 1099511627776 * 1099511627776 does not fit in 64 bits");
  }
}

}  // namespace
}  // namespace hstu
