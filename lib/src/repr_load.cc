// lib/src/repr_load.cc: representation shape, destination checks and scatter (see repr_load.h).
#include "ucm/core/repr_load.h"

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ucm/core/c_struct.h"
#include "ucm/half.h"

namespace ucm::detail {
namespace {

int32_t ucm_dtype_of(DType d) {
  return d == DType::kBF16 ? UCM_DTYPE_BF16 : d == DType::kFP16 ? UCM_DTYPE_F16 : UCM_DTYPE_F32;
}

// Copies `count` elements of section dtype `sdt` at src to dst in C dtype `ddt` (F32 converts;
// otherwise the caller checked sdt is the same type, and it is a memcpy).
void copy_elems(const uint8_t* src, uint32_t sdt, void* dst, int32_t ddt, size_t count) {
  if (ddt != UCM_DTYPE_F32 || sdt == fmt::kReprFP32) {
    std::memcpy(dst, src, count * fmt::repr_dtype_size(sdt));
    return;
  }
  float* d = static_cast<float*>(dst);
  uint16_t tmp[256];
  for (size_t base = 0; base < count; base += 256) {
    const size_t m = std::min<size_t>(256, count - base);
    std::memcpy(tmp, src + base * 2, m * 2);
    if (sdt == fmt::kReprBF16)
      for (size_t i = 0; i < m; ++i) d[base + i] = bf16_to_f32(tmp[i]);
    else
      for (size_t i = 0; i < m; ++i) d[base + i] = f16_to_f32(tmp[i]);
  }
}

}  // namespace

Status repr_geometry(const NamespaceDesc& d, ReprGeometry* g) {
  *g = ReprGeometry{};
  g->shape = {d.num_layers, d.num_kv_heads, d.head_dim, d.block_size, 0};
  g->dtype = d.dtype;
  nlohmann::json ex = nlohmann::json::parse(d.extra_json, nullptr, false);
  if (ex.is_discarded() || !ex.is_object())
    return Status::Corruption("namespace " + d.display_name() + ": extra is not a JSON object");
  if (ex.contains("repr") && ex["repr"].is_array()) {
    for (const auto& s : ex["repr"])
      if (s.is_string()) {
        const std::string n = s.get<std::string>();
        g->sections |= n == "R0" ? UCM_REPR_R0 : n == "R1" ? UCM_REPR_R1 : n == "R4" ? UCM_REPR_R4 : 0u;
      }
  } else if (ex.contains("hash_bits")) {
    g->sections = UCM_REPR_R0 | UCM_REPR_R1 | UCM_REPR_R4;
  }
  if (g->sections == 0)
    return Status::NotSupported("namespace " + d.display_name() +
                                " has no block representations (extra has neither \"repr\" nor \"hash_bits\")");
  if (g->sections & UCM_REPR_R4) {
    const auto& hb = ex.contains("hash_bits") ? ex["hash_bits"] : nlohmann::json();
    if (!hb.is_number_unsigned() || hb.get<uint64_t>() == 0 || hb.get<uint64_t>() % 8 != 0 ||
        hb.get<uint64_t>() > (1u << 16))
      return Status::Corruption("namespace " + d.display_name() +
                                ": R4 without a positive multiple of 8 (<= 65536) as extra.hash_bits");
    g->shape.hash_bits = hb.get<uint32_t>();
  }
  if (ex.contains("dense_layers") && ex["dense_layers"].is_array())
    for (const auto& l : ex["dense_layers"])
      if (l.is_number_unsigned() && l.get<uint64_t>() < 64) g->dense_layers |= uint64_t{1} << l.get<uint64_t>();
  return Status::OK();
}

void repr_info_from(const ReprGeometry& g, ucm_repr_info* out) {
  out->num_layers = g.shape.num_layers;
  out->num_kv_heads = g.shape.num_kv_heads;
  out->head_dim = g.shape.head_dim;
  out->block_size = g.shape.block_size;
  out->hash_bits = g.shape.hash_bits;
  out->dtype = ucm_dtype_of(g.dtype);
  out->sections = g.sections;
  out->dense_layers = g.dense_layers;
}

Status resolve_repr_dest(const ReprGeometry& g, const ucm_repr_buffers* b, size_t first, size_t n, ReprDest* out) {
  if (!b) return Status::InvalidArgument("dst is NULL");
  UCM_RETURN_IF_ERROR(capi::check_struct_size<ucm_repr_buffers>("dst", b->struct_size));
  const uint32_t H = g.shape.num_kv_heads;
  ReprDest d;
  d.h0 = b->head_begin;
  d.h1 = (b->head_begin == 0 && b->head_end == 0) ? H : b->head_end;
  if (d.h0 >= d.h1 || d.h1 > H)
    return Status::InvalidArgument("KV-head range [" + std::to_string(b->head_begin) + ", " +
                                   std::to_string(b->head_end) + ") is not within [0, " + std::to_string(H) + ")");
  const int32_t ns_dt = ucm_dtype_of(g.dtype);
  if (b->dtype != UCM_DTYPE_F32 && b->dtype != ns_dt)
    return Status::InvalidArgument("dst->dtype " + std::to_string(b->dtype) + " is neither UCM_DTYPE_F32 (3) nor the "
                                   "namespace dtype (" + std::to_string(ns_dt) + ")");
  if (first > b->capacity || n > b->capacity - first)
    return Status::InvalidArgument("first " + std::to_string(first) + " + n " + std::to_string(n) +
                                   " exceeds dst->capacity " + std::to_string(b->capacity));
  if (!b->r0 && !b->r1 && !b->r4) return Status::InvalidArgument("dst has no array (r0, r1 and r4 are all NULL)");
  const struct {
    const void* p;
    uint32_t bit;
    const char* name;
  } arrs[] = {{b->r0, UCM_REPR_R0, "r0"}, {b->r1, UCM_REPR_R1, "r1"}, {b->r4, UCM_REPR_R4, "r4"}};
  for (const auto& a : arrs)
    if (a.p && !(g.sections & a.bit))
      return Status::InvalidArgument(std::string("dst->") + a.name + " is set but the namespace has no such section");
  d.dtype = b->dtype;
  d.capacity = b->capacity;
  d.r0 = b->r0;
  d.r1 = b->r1;
  d.r4 = b->r4;
  *out = d;
  return Status::OK();
}

Status scatter_repr(const ReprGeometry& g, const ReprDest& dst, size_t slot, const uint8_t* payload, size_t len) {
  std::vector<fmt::ReprSectionRef> table;
  UCM_RETURN_IF_ERROR(fmt::parse_repr_table(payload, len, &table));
  const fmt::ReprSectionRef *s0 = nullptr, *s1 = nullptr, *s4 = nullptr;
  auto need = [&](const void* arr, uint32_t kind, const fmt::ReprSectionRef** s) -> Status {
    if (!arr) return Status::OK();
    Status st = fmt::find_repr_section(table, kind, g.shape, s);
    if (st.code() == Code::kNotFound) return Status::Corruption(st.message() + ", which the namespace carries");
    if (!st.ok()) return st;
    if (kind != fmt::kReprR4SignHash && dst.dtype != UCM_DTYPE_F32 &&
        fmt::repr_dtype_size((*s)->dtype) != 0 && int32_t((*s)->dtype) != dst.dtype)
      return Status::Corruption("representation section kind " + std::to_string(kind) + " is stored as dtype " +
                                std::to_string((*s)->dtype) + ", not the namespace dtype " + std::to_string(dst.dtype));
    return Status::OK();
  };
  UCM_RETURN_IF_ERROR(need(dst.r0, fmt::kReprR0MeanKey, &s0));
  UCM_RETURN_IF_ERROR(need(dst.r1, fmt::kReprR1KeyBounds, &s1));
  UCM_RETURN_IF_ERROR(need(dst.r4, fmt::kReprR4SignHash, &s4));

  const size_t L = g.shape.num_layers, H = g.shape.num_kv_heads, D = g.shape.head_dim, T = g.shape.block_size;
  const size_t Hs = dst.h1 - dst.h0, C = dst.capacity;
  const size_t des = dst.dtype == UCM_DTYPE_F32 ? 4 : 2;  // destination element size
  for (size_t l = 0; l < L; ++l)
    for (size_t hh = 0; hh < Hs; ++hh) {
      const size_t h = dst.h0 + hh, row = (l * Hs + hh) * C + slot;  // (layer, head, block) row
      if (s0) {
        const size_t es = fmt::repr_dtype_size(s0->dtype);
        copy_elems(payload + s0->offset + (l * H + h) * D * es, s0->dtype,
                   static_cast<uint8_t*>(dst.r0) + row * D * des, dst.dtype, D);
      }
      if (s1) {
        const size_t es = fmt::repr_dtype_size(s1->dtype);
        uint8_t* o = static_cast<uint8_t*>(dst.r1) + row * 2 * D * des;
        copy_elems(payload + s1->offset + ((l * 2 + 0) * H + h) * D * es, s1->dtype, o, dst.dtype, D);
        copy_elems(payload + s1->offset + ((l * 2 + 1) * H + h) * D * es, s1->dtype, o + D * des, dst.dtype, D);
      }
      if (s4) {
        const size_t bytes = T * (g.shape.hash_bits / 8);
        std::memcpy(dst.r4 + row * bytes, payload + s4->offset + (l * H + h) * bytes, bytes);
      }
    }
  return Status::OK();
}

}  // namespace ucm::detail
