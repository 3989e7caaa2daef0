// crc32c.h — CRC-32C (Castagnoli), shared by the TensorBoard event files (TFRecord framing) and
// the checkpoint manifests (a checksum per file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hstu {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of bytes; crc32c("123456789") is
// 0xE3069283.
uint32_t crc32c(std::string_view bytes);
// Extends `crc` (a crc32c() result; 0 for no bytes yet) by more bytes:
// crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, std::string_view bytes);
// The CRC-32C of a file's bytes, read in blocks; throws naming the file if it cannot be read.
uint32_t crc32c_file(const std::string& path);

}  // namespace hstu
