// lib/src/include/ucm/core/evp.h: an OpenSSL digest context owned by a unique_ptr (the block hash
// chain, hash.cc; SGLang's page keys, sglang_keys.cc). Internal to libucm.
#pragma once
#include <openssl/evp.h>

#include <memory>
#include <new>

namespace ucm::core {

struct EvpCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using EvpCtx = std::unique_ptr<EVP_MD_CTX, EvpCtxFree>;

/// A new digest context; throws std::bad_alloc when OpenSSL cannot make one.
inline EvpCtx new_evp_ctx() {
  EvpCtx ctx(EVP_MD_CTX_new());
  if (!ctx) throw std::bad_alloc();
  return ctx;
}

}  // namespace ucm::core
