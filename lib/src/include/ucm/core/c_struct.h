// lib/src/include/ucm/core/c_struct.h: the growth rule of the C ABI's structs (ucm/ucm.h,
// "Structs that grow"), in one place: each struct's smallest accepted struct_size (the size of its
// first release), the check every entry point makes, and the reads and writes that honour the
// caller's size. Internal to libucm.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "ucm/blend.h"
#include "ucm/corpus.h"
#include "ucm/retrieval.h"
#include "ucm/status.h"
#include "ucm/ucm.h"

/// Bytes of struct T up to the end of `field`: the size of a release whose last field was `field`.
#define UCM_SIZE_THROUGH(T, field) (offsetof(T, field) + sizeof(static_cast<T*>(nullptr)->field))

namespace ucm::capi {

/// The smallest struct_size libucm accepts for T: the size of T's first release. Defined below
/// for every struct of the C ABI; a struct without an entry does not compile into the helpers.
template <class T>
inline constexpr size_t kMinStructSize = 0;

// 0.2.0, unchanged since.
template <>
inline constexpr size_t kMinStructSize<ucm_store_open_params> = sizeof(ucm_store_open_params);
// 0.5.2: the host fields (what ucm_store_load takes) are the minimum, as documented in ucm.h.
template <>
inline constexpr size_t kMinStructSize<ucm_store_load_params> = UCM_SIZE_THROUGH(ucm_store_load_params, head_end);
// 0.7.0; 0.8.0 added kv_pages and the strides: 0.7.0's fields are the minimum.
template <>
inline constexpr size_t kMinStructSize<ucm_store_dump_params> = UCM_SIZE_THROUGH(ucm_store_dump_params, tokens);
// retrieval.h, 0.2.0, unchanged since.
template <>
inline constexpr size_t kMinStructSize<ucm_repr_info> = sizeof(ucm_repr_info);
template <>
inline constexpr size_t kMinStructSize<ucm_repr_buffers> = sizeof(ucm_repr_buffers);
template <>
inline constexpr size_t kMinStructSize<ucm_retriever_params> = sizeof(ucm_retriever_params);
template <>
inline constexpr size_t kMinStructSize<ucm_retrieval_query> = sizeof(ucm_retrieval_query);
// blend.h: 0.4.0's select params ended at position_decay (relevance_exponent came in 0.5.0).
template <>
inline constexpr size_t kMinStructSize<ucm_blend_select_params> =
    UCM_SIZE_THROUGH(ucm_blend_select_params, position_decay);
// 0.6.0: the layout changed (uint32_t struct_size), so this release is the first.
template <>
inline constexpr size_t kMinStructSize<ucm_rope_params> = sizeof(ucm_rope_params);
// corpus.h, 0.10.0.
template <>
inline constexpr size_t kMinStructSize<ucm_corpus_open_params> = sizeof(ucm_corpus_open_params);

template <class T>
constexpr void static_check_struct() {
  static_assert(std::is_standard_layout_v<T> && offsetof(T, struct_size) == 0, "struct_size must come first");
  static_assert(std::is_same_v<decltype(T::struct_size), uint32_t>, "struct_size must be a uint32_t");
  static_assert(kMinStructSize<T> >= sizeof(uint32_t) && kMinStructSize<T> <= sizeof(T),
                "every C ABI struct needs its kMinStructSize");
}

/// OK when `size` is a struct_size the library accepts for T (>= kMinStructSize<T>; a larger size
/// than sizeof(T), from a newer ucm.h, is accepted and its extra fields ignored). Else
/// InvalidArgument naming `what`, the size and the minimum.
template <class T>
Status check_struct_size(const std::string& what, uint32_t size) {
  static_check_struct<T>();
  if (size >= kMinStructSize<T>) return Status::OK();
  return Status::InvalidArgument(what + "->struct_size " + std::to_string(size) + " is below the smallest accepted (" +
                                 std::to_string(kMinStructSize<T>) + ", this library's is " +
                                 std::to_string(sizeof(T)) + "); start from the defaults call or sizeof");
}

/// An in-struct as this library sees it: `defaults` overlaid with the first in->struct_size bytes
/// of *in (at most sizeof(T)), so the fields an older caller lacks take their defaults; then
/// out->struct_size = sizeof(T). `in` must not be NULL.
template <class T>
Status read_struct(const std::string& what, const T* in, const T& defaults, T* out) {
  uint32_t size = 0;
  std::memcpy(&size, in, sizeof size);
  UCM_RETURN_IF_ERROR(check_struct_size<T>(what, size));
  T v = defaults;
  std::memcpy(static_cast<void*>(&v), static_cast<const void*>(in), std::min<size_t>(size, sizeof(T)));
  v.struct_size = sizeof(T);
  *out = v;
  return Status::OK();
}

/// An in-struct without a defaults call: the fields it lacks are zero.
template <class T>
Status read_struct(const std::string& what, const T* in, T* out) {
  T zero;
  std::memset(static_cast<void*>(&zero), 0, sizeof zero);
  return read_struct(what, in, zero, out);
}

/// An out-struct: writes `value` into *out up to the caller's out->struct_size (at most sizeof(T)),
/// never past it; out->struct_size keeps the caller's value. `out` must not be NULL.
template <class T>
Status write_struct(const std::string& what, const T& value, T* out) {
  uint32_t size = 0;
  std::memcpy(&size, out, sizeof size);
  UCM_RETURN_IF_ERROR(check_struct_size<T>(what, size));
  T v = value;
  v.struct_size = size;
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(&v), std::min<size_t>(size, sizeof(T)));
  return Status::OK();
}

}  // namespace ucm::capi
