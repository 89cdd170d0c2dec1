// lib/src/include/ucm/core/c_api_internal.h: what the C ABI translation units of libucm share
// (c_api*.cc): the handle structs, the return-code / last-error / exception-guard helpers and the
// "Sized outputs" rule of ucm/ucm.h. The growth rule of structs: ucm/core/c_struct.h. Internal.
#pragma once
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "ucm/status.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

struct ucm_store {
  std::unique_ptr<ucm::Store> s;
};
struct ucm_task {
  std::shared_ptr<ucm::Task> t;
};

namespace ucm::capi {

/// The calling thread's last error text (ucm_last_error).
std::string& last_error();

inline int fail(const ucm::Status& s) {
  last_error() = s.ToString();
  return static_cast<int>(s.code());
}
inline int fail(int code, const std::string& msg) {
  last_error() = std::string(ucm::code_name(static_cast<ucm::Code>(code))) + ": " + msg;
  return code;
}
inline int ok() {
  last_error().clear();
  return UCM_OK;
}

/// Runs f, turning exceptions into UCM_E_INTERNAL (no exception crosses the C ABI).
template <class F>
int guarded(const char* fn, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(UCM_E_INTERNAL, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(UCM_E_INTERNAL, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail(UCM_E_INTERNAL, std::string(fn) + ": unknown exception");
  }
}

inline ucm::NamespaceId ns_of(const uint8_t* p) {
  ucm::NamespaceId n{};
  std::memcpy(n.data(), p, 16);
  return n;
}
inline const ucm::BlockHash* hashes_of(const uint8_t* p) {
  static_assert(sizeof(ucm::BlockHash) == 16, "BlockHash must be 16 packed bytes");
  return reinterpret_cast<const ucm::BlockHash*>(p);
}

/// The "Sized outputs" rule of ucm/ucm.h, for every function that copies a variable-size output
/// into a caller buffer: *len (when len is not NULL) = data.size() (without NUL); buf NULL: a size
/// query, UCM_OK and nothing written; cap < data.size() (+ 1 for a text's NUL): UCM_E_INVALID,
/// nothing written, the message giving the size needed; else the copy (NUL-terminated when text).
inline int sized_output(const char* fn, const std::string& data, bool text, void* buf, size_t cap, size_t* len) {
  if (len) *len = data.size();
  if (!buf) return ok();
  const size_t need = data.size() + (text ? 1 : 0);
  if (cap < need)
    return fail(UCM_E_INVALID, std::string(fn) + ": the buffer holds " + std::to_string(cap) + " bytes, the output needs " +
                                   std::to_string(need) + (text ? " (with its NUL)" : ""));
  if (need) std::memcpy(buf, data.c_str(), need);
  return ok();
}

/// Hands a store task to the caller as *out; a task that already failed with InvalidArgument
/// (bad argument, before any I/O) is returned as that error instead.
int finish_task(std::shared_ptr<ucm::Task> t, ucm_task_t** out);

}  // namespace ucm::capi
