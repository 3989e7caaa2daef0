// test_safetensors.cpp — safetensors round trips (every dtype, strided views, metadata), header
// layout, rejection of corrupted files with errors naming them, atomic writes, and loading our
// files with the Python reference implementation when it is installed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "train/json.h"
#include "train/safetensors.h"

namespace hstu {
namespace {

using test::error_of;
using test::read_file;
using test::write_file;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Tensors of every dtype and layout, with the dense bytes each must be saved as.
struct Sample {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::vector<uint8_t>> expected;

  template <typename T>
  void add(const std::string& name, DType dtype, std::vector<T> values,
           std::initializer_list<int64_t> dims) {
    storage.push_back(bytes_of(values));
    tensors.emplace_back(name, Tensor(storage.back().data(), dtype, Device::kCPU, dims));
    expected[name] = storage.back();
  }

  Sample() {
    storage.reserve(16);  // Tensors point into storage: no reallocation
    std::vector<float> f32(6);
    for (int i = 0; i < 6; ++i) f32[i] = i * 0.25f - 1;
    add("f32", DType::kF32, f32, {2, 3});
    std::vector<double> f64(4);
    for (int i = 0; i < 4; ++i) f64[i] = i / 3.0;
    add("f64", DType::kF64, f64, {4});
    std::vector<uint16_t> bf16(6), f16(5);
    for (int i = 0; i < 6; ++i) bf16[i] = static_cast<uint16_t>(0x3F80 + i);
    for (int i = 0; i < 5; ++i) f16[i] = static_cast<uint16_t>(0x3C00 + i);
    add("bf16", DType::kBF16, bf16, {3, 2});
    add("f16", DType::kF16, f16, {5});
    add("i32", DType::kI32, std::vector<int32_t>{0, -7, -14, -21}, {2, 2});
    add("i64", DType::kI64, std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}, {3});
    std::vector<uint8_t> u8(7);
    for (int i = 0; i < 7; ++i) u8[i] = static_cast<uint8_t>(i * 37 % 256);
    add("u8", DType::kU8, u8, {7});
    std::vector<float> f4d(12);
    for (int i = 0; i < 12; ++i) f4d[i] = static_cast<float>(i);
    add("f32_4d", DType::kF32, f4d, {2, 1, 2, 3});
    add("empty", DType::kF32, std::vector<float>{0}, {0, 3});
    expected["empty"].clear();

    // Columns 1..2 of a [3,5] matrix holding r*5+c: a strided 2-D view.
    std::vector<float> wide(15);
    for (int i = 0; i < 15; ++i) wide[i] = static_cast<float>(i);
    storage.push_back(bytes_of(wide));
    tensors.emplace_back(
        "strided", Tensor(storage.back().data(), DType::kF32, Device::kCPU, {3, 5}).cols(1, 3));
    expected["strided"] = bytes_of(std::vector<float>{1, 2, 6, 7, 11, 12});
    // A [2,2,3] view with rows 10 elements apart: a strided 3-D view.
    std::vector<int32_t> rows(20);
    for (int i = 0; i < 20; ++i) rows[i] = i;
    storage.push_back(bytes_of(rows));
    Tensor t(storage.back().data(), DType::kI32, Device::kCPU, {2, 2, 3});
    t.row_stride = 10;
    tensors.emplace_back("strided3d", t);
    expected["strided3d"] =
        bytes_of(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  }
};

const std::map<std::string, std::string> kMetadata = {
    {"format", "pt"}, {"step", "12"}, {"note", "h\xc3\xa9llo \"quoted\""}};

TEST(Safetensors, RoundTripEveryDtype) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const Sample s;
  save_safetensors(path, s.tensors, kMetadata);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const SafetensorsFile f(path);
  std::vector<std::string> names;
  for (const auto& [name, t] : s.tensors) names.push_back(name);
  EXPECT_EQ(f.names(), names);
  EXPECT_EQ(f.metadata(), kMetadata);
  for (const auto& [name, t] : s.tensors) {
    const SafetensorsFile::Entry& e = f.get(name);
    EXPECT_EQ(e.dtype, t.dtype) << name;
    EXPECT_EQ(e.shape, std::vector<int64_t>(t.shape, t.shape + t.ndim)) << name;
    EXPECT_EQ(e.numel(), t.numel()) << name;
    const std::vector<uint8_t> got(e.bytes.begin(), e.bytes.end());
    EXPECT_EQ(got, s.expected.at(name)) << name;
  }
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_NE(error_of([&] { f.get("nope"); }).find(path + ": no tensor \"nope\""),
            std::string::npos);

  // copy_to: into a contiguous tensor and into a strided view.
  std::vector<float> dense(6), wide(3 * 4, -1.f);
  f.copy_to("strided", Tensor(dense.data(), DType::kF32, Device::kCPU, {3, 2}));
  EXPECT_EQ(bytes_of(dense), s.expected.at("strided"));
  f.copy_to("f32", Tensor(wide.data(), DType::kF32, Device::kCPU, {2, 4}).cols(1, 4));
  EXPECT_EQ(wide,
            (std::vector<float>{-1, -1, -0.75f, -0.5f, -1, -0.25f, 0, 0.25f, -1, -1, -1, -1}));
  const std::string msg = error_of([&] {
    f.copy_to("f32", Tensor(dense.data(), DType::kF32, Device::kCPU, {3, 2}));
  });
  EXPECT_NE(msg.find(path + ": tensor \"f32\" is F32[2,3], expected f32[3,2]"), std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] {
              f.copy_to("i32", Tensor(dense.data(), DType::kF32, Device::kCPU, {2, 2}));
            }).find("I32[2,2]"),
            std::string::npos);
}

TEST(Safetensors, HeaderLayout) {
  test::TempDir dir;
  const std::string path = dir.file("a.safetensors");
  float v[2] = {1.0f, 2.0f};
  save_safetensors(path, {{"a", Tensor(v, DType::kF32, Device::kCPU, {2})}});
  const std::string file = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(n, (json.size() + 7) / 8 * 8);
  EXPECT_EQ(file.substr(8, n), json + std::string(n - json.size(), ' '));
  EXPECT_EQ(file.size(), 8 + n + 8);
  EXPECT_EQ(file.substr(8 + n), std::string(reinterpret_cast<const char*>(v), 8));

  // Every header is padded, whatever its length; metadata is written as __metadata__.
  for (int len = 1; len <= 9; ++len) {
    save_safetensors(path, {{std::string(len, 'x'), Tensor(v, DType::kF32, Device::kCPU, {1})}},
                     {{"k", "v"}});
    const std::string f2 = read_file(path);
    std::memcpy(&n, f2.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(f2.size(), 8 + n + 4);
    EXPECT_EQ(json::parse(f2.substr(8, n)).at("__metadata__").at("k").as_string(), "v");
  }
}

// A file with the given header text (unpadded) and data bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data_bytes, '\0');
}

TEST(Safetensors, CorruptedFilesGiveErrorsNamingThem) {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto expect_bad = [&](const std::string& bytes, const std::string& what) {
    write_file(path, bytes);
    const std::string msg = error_of([&] { SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  };
  const auto t = [](const std::string& fields) { return "{\"a\":{" + fields + "}}"; };
  const std::string ok_fields = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";

  expect_bad("", "truncated safetensors file (0 bytes");
  expect_bad("1234", "truncated safetensors file (4 bytes");
  expect_bad(raw_file("{}", 0).substr(0, 9), "header length 2 but only 1 bytes follow");
  expect_bad(std::string(8, '\0'), "invalid header length 0");
  expect_bad(std::string(8, '\xff') + "{}", "invalid header length");
  {
    const std::string good = raw_file(t(ok_fields), 8);
    expect_bad(good.substr(0, good.size() - 4), "beyond the 4 data bytes (truncated file?)");
  }
  expect_bad(raw_file(R"({"a":{"dtype":"F32",}})", 0), path + " header:1:21: ");
  expect_bad(raw_file("[1]", 0), "header is not a JSON object");
  expect_bad(raw_file(R"({"a":{"dtype":"F32"},"a":{}})", 0), "duplicate key \"a\"");
  expect_bad(raw_file(t(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"), 8),
             "tensor \"a\": F32[3] needs 12 bytes but data_offsets [0,8] hold 8");
  expect_bad(raw_file(t(R"("dtype":"BOOL","shape":[8],"data_offsets":[0,8])"), 8),
             "unsupported dtype \"BOOL\"");
  expect_bad(raw_file(t(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"), 8),
             "invalid dim -2");
  expect_bad(raw_file(t(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), 8),
             "invalid data_offsets [8,0]");
  expect_bad(raw_file(t(R"("dtype":"F32","shape":[2])"), 8), "needs dtype, shape and data_offsets");
  expect_bad(raw_file(t(ok_fields + R"(,"extra":1)"), 8), "unknown field \"extra\"");
  expect_bad(raw_file(t(ok_fields), 12), "4 bytes after the last tensor");
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12),
             "tensor \"b\" overlaps the one before it");
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      12),
             "gap in the data before tensor \"b\"");
  expect_bad(raw_file(R"({"__metadata__":{"k":1}})", 0),
             "__metadata__ value \"k\" is not a string");
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],)"
                      R"("data_offsets":[0,8]}})",
                      8),
             "shape overflows");

  const std::string missing = dir.file("missing.safetensors");
  EXPECT_NE(error_of([&] { SafetensorsFile f(missing); }).find("cannot open " + missing),
            std::string::npos);
}

TEST(Safetensors, InvalidSavesWriteNothing) {
  test::TempDir dir;
  const std::string path = dir.file("x.safetensors");
  float v[2] = {1, 2};
  const Tensor cpu(v, DType::kF32, Device::kCPU, {2});
  Tensor gpu = cpu;
  gpu.device = Device::kCUDA;
  const auto expect_refused = [&](const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::string& what) {
    const std::string msg = error_of([&] { save_safetensors(path, tensors); });
    EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  };
  expect_refused({{"a", cpu}, {"a", cpu}}, "tensor \"a\" given twice");
  expect_refused({{"__metadata__", cpu}}, "invalid tensor name");
  expect_refused({{"", cpu}}, "invalid tensor name");
  expect_refused({{"a", cpu}, {"g", gpu}}, "copy it to the CPU");
  expect_refused({{"e", Tensor()}}, "is empty");
}

TEST(AtomicFile, ReplacesWholeFileAndLeavesNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.file("state.json");
  atomic_write_file(path, "a much longer first version of the file");
  atomic_write_file(path, "{\"step\": 2}");
  EXPECT_EQ(read_file(path), "{\"step\": 2}");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Large writes mixing buffered and direct paths.
  std::string big;
  for (int i = 0; i < 700000; ++i) big += static_cast<char>('a' + i % 26);
  {
    AtomicFile f(path);
    f.write(big.data(), 10);
    f.write(big.data() + 10, big.size() / 2);
    f.write(big.data() + 10 + big.size() / 2, big.size() - 10 - big.size() / 2);
    f.commit();
  }
  EXPECT_EQ(read_file(path), big);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(AtomicFile, AbandonedWriteKeepsTheOldFile) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  atomic_write_file(path, "old");
  try {
    AtomicFile f(path);
    f.write("partial new content", 19);
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    throw std::runtime_error("crash mid-write");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_NE(error_of([&] {
              atomic_write_file(dir.file("no/such/dir/x"), "x");
            }).find("cannot create " + dir.file("no/such/dir/x.tmp")),
            std::string::npos);
}

// Checks our file with the reference implementation: safetensors.deserialize (raw bytes, every
// dtype), safe_open + numpy (values of the numpy dtypes) and the metadata.
constexpr const char* kPythonCheck = R"PY(
import sys
import numpy as np
import safetensors
from safetensors import safe_open

path = sys.argv[1]
raw = dict(safetensors.deserialize(open(path, "rb").read()))
def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
want = {
    "f32": (np.arange(6, dtype=np.float32) * np.float32(0.25) - np.float32(1)).reshape(2, 3),
    "f64": np.arange(4) / 3.0,
    "f16": (np.arange(5) + 0x3C00).astype("<u2").view(np.float16),
    "i32": np.array([[0, -7], [-14, -21]], dtype=np.int32),
    "i64": np.array([-2**63, 0, 2**63 - 1], dtype=np.int64),
    "u8": (np.arange(7) * 37 % 256).astype(np.uint8),
    "f32_4d": np.arange(12, dtype=np.float32).reshape(2, 1, 2, 3),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "strided": np.array([[1, 2], [6, 7], [11, 12]], dtype=np.float32),
    "strided3d": np.array([[[0, 1, 2], [3, 4, 5]], [[10, 11, 12], [13, 14, 15]]], dtype=np.int32),
}
check(sorted(raw) == sorted(list(want) + ["bf16"]), "names %s" % sorted(raw))
check(raw["bf16"]["dtype"] == "BF16" and list(raw["bf16"]["shape"]) == [3, 2], "bf16 header")
check(bytes(raw["bf16"]["data"]) == (np.arange(6) + 0x3F80).astype("<u2").tobytes(), "bf16 data")
with safe_open(path, framework="np") as f:
    check(f.metadata() == {"format": "pt", "step": "12", "note": "h\u00e9llo \"quoted\""},
          "metadata %s" % f.metadata())
    for name, w in want.items():
        got = f.get_tensor(name)
        check(got.dtype == w.dtype and got.shape == w.shape and np.array_equal(got, w),
              "%s: got %r, want %r" % (name, got, w))
print("OK")
)PY";

TEST(Safetensors, LoadsInPython) {
  if (std::system("python3 -c 'import safetensors, numpy' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with safetensors and numpy not available";
  }
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::string script = dir.file("check.py");
  save_safetensors(path, Sample().tensors, kMetadata);
  write_file(script, kPythonCheck);
  const std::string cmd = "python3 " + script + " " + path + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "OK\n");
}

}  // namespace
}  // namespace hstu
