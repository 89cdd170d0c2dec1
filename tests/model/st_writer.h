// Test helper: writes a safetensors file by hand, following formats/safetensors/safetensors.md
// (8-byte little-endian header length, JSON header padded with spaces to 8 bytes, data).
// Deliberately independent of the reader under test.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace ucm::testing {

struct StTensor {
  std::string name;
  std::string dtype;             // header spelling, e.g. "F32"
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

template <typename T>
inline std::vector<unsigned char> st_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Builds the header JSON by string concatenation (no JSON library).
inline std::string st_header(const std::vector<StTensor>& ts, const std::string& metadata_json) {
  std::string h = "{";
  bool first = true;
  if (!metadata_json.empty()) {
    h += "\"__metadata__\":" + metadata_json;
    first = false;
  }
  uint64_t off = 0;
  for (const auto& t : ts) {
    if (!first) h += ",";
    first = false;
    h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  return h;
}

/// Writes header length (LE u64), `header` verbatim, then the tensors' bytes in order.
inline void st_write_raw(const std::string& path, const std::string& header, const std::vector<StTensor>& ts) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& t : ts) f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

inline void st_write(const std::string& path, const std::vector<StTensor>& ts, const std::string& metadata_json = "") {
  st_write_raw(path, st_header(ts, metadata_json), ts);
}

}  // namespace ucm::testing
