// crc32c.cpp — table-driven CRC-32C.
#include "io/crc32c.h"

#include <array>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace hstu {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

}  // namespace

uint32_t crc32c_extend(uint32_t crc, std::string_view bytes) {
  crc ^= 0xFFFFFFFFu;
  for (const char ch : bytes)
    crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t crc32c(std::string_view bytes) {
  return crc32c_extend(0, bytes);
}

uint32_t crc32c_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HSTU_CHECK(in, "cannot read ", path);
  std::vector<char> block(size_t(1) << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    crc = crc32c_extend(crc, std::string_view(block.data(), static_cast<size_t>(in.gcount())));
  }
  HSTU_CHECK(in.eof(), "cannot read ", path);
  return crc;
}

}  // namespace hstu
