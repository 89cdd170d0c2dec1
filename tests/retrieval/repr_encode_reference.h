// tests/retrieval/repr_encode_reference.h: a BLOCK_REPR payload encoder for tests, written from
// store_v1.md §4.3 independently of the library and of `ucm precompute`: known integer values
// (exact in bf16 and fp16), sections in either order, optionally a wrong R0 length.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace reprtest {

struct Shape {
  uint32_t L = 2, H = 3, D = 8, T = 4, B = 16;
};

/// Known element of block blk: k 0 = R0, 1 = R1 min, 2 = R1 max. An integer in [-100, 100].
inline float value(int k, size_t blk, uint32_t l, uint32_t h, uint32_t d) {
  return float(int((blk * 131 + l * 71 + h * 37 + d * 11 + size_t(k) * 53) % 201) - 100);
}
/// Known byte j of token t's sign code.
inline uint8_t code_byte(size_t blk, uint32_t l, uint32_t h, uint32_t t, size_t j) {
  return uint8_t(blk * 29 + l * 17 + h * 13 + t * 7 + j * 3 + 1);
}

inline uint16_t to_bf16(float f) {  // exact for integers of magnitude <= 256
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
inline uint16_t to_f16(float f) {  // exact for integers of magnitude <= 2048
  if (f == 0) return 0;
  const uint16_t sign = f < 0 ? 0x8000 : 0;
  const float a = std::fabs(f);
  int e = 0;
  while (std::ldexp(1.0f, e + 1) <= a) ++e;
  const uint32_t man = uint32_t(std::ldexp(a, 10 - e)) - 1024u;  // 10 fraction bits
  return uint16_t(sign | uint16_t((e + 15) << 10) | uint16_t(man));
}

inline void put32(std::vector<uint8_t>& v, size_t at, uint32_t x) {
  for (int i = 0; i < 4; ++i) v[at + i] = uint8_t(x >> (8 * i));
}
inline void put64(std::vector<uint8_t>& v, size_t at, uint64_t x) {
  for (int i = 0; i < 8; ++i) v[at + i] = uint8_t(x >> (8 * i));
}

/// The payload of block blk: R0, R1, R4 (reverse: R4, R1, R0) at 64-byte aligned offsets after
/// the table; dtype code 1 (bf16) or 2 (fp16, when fp16) for R0/R1, 4 for R4.
inline std::vector<uint8_t> encode(const Shape& s, bool fp16, size_t blk, bool reverse, bool bad_r0_length) {
  const size_t lhd = size_t{s.L} * s.H * s.D, r4len = size_t{s.L} * s.H * s.T * s.B / 8;
  struct Sec {
    uint32_t kind, dtype;
    size_t len, off;
  };
  std::vector<Sec> secs = {{0, fp16 ? 2u : 1u, lhd * 2, 0}, {1, fp16 ? 2u : 1u, 2 * lhd * 2, 0}, {4, 4, r4len, 0}};
  if (reverse) std::swap(secs[0], secs[2]);
  size_t off = (8 + 24 * secs.size() + 63) / 64 * 64;
  for (auto& x : secs) {
    x.off = off;
    off = (off + x.len + 63) / 64 * 64;
  }
  std::vector<uint8_t> p(secs.back().off + secs.back().len, 0);
  std::memcpy(p.data(), "UCMP", 4);
  put32(p, 4, uint32_t(secs.size()));
  for (size_t i = 0; i < secs.size(); ++i) {
    put32(p, 8 + 24 * i, secs[i].kind);
    put32(p, 8 + 24 * i + 4, secs[i].dtype);
    put64(p, 8 + 24 * i + 8, secs[i].off);
    put64(p, 8 + 24 * i + 16, secs[i].len - (bad_r0_length && secs[i].kind == 0 ? 2 : 0));
  }
  auto put16 = [&](size_t at, float v) {
    const uint16_t b = fp16 ? to_f16(v) : to_bf16(v);
    p[at] = uint8_t(b);
    p[at + 1] = uint8_t(b >> 8);
  };
  for (const auto& x : secs)
    for (uint32_t l = 0; l < s.L; ++l)
      for (uint32_t h = 0; h < s.H; ++h) {
        if (x.kind == 0)
          for (uint32_t d = 0; d < s.D; ++d) put16(x.off + 2 * ((size_t{l} * s.H + h) * s.D + d), value(0, blk, l, h, d));
        if (x.kind == 1)
          for (int m = 0; m < 2; ++m)
            for (uint32_t d = 0; d < s.D; ++d)
              put16(x.off + 2 * (((size_t{l} * 2 + m) * s.H + h) * s.D + d), value(1 + m, blk, l, h, d));
        if (x.kind == 4)
          for (uint32_t t = 0; t < s.T; ++t)
            for (size_t j = 0; j < s.B / 8; ++j)
              p[x.off + ((size_t{l} * s.H + h) * s.T + t) * (s.B / 8) + j] = code_byte(blk, l, h, t, j);
      }
  return p;
}

}  // namespace reprtest
