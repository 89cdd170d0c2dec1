// lib/src/c_api_load.cc: loads of the C ABI (ucm/ucm.h): ucm_store_load, ucm_store_load_ex and its
// params, ucm_cuda_device_count.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "ucm/core/c_api_internal.h"
#include "ucm/core/c_struct.h"
#include "ucm/core/cuda_plugin.h"
#include "ucm/core/device_load.h"
#include "ucm/ucm.h"

using namespace ucm::capi;

namespace {

int load_host(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n, const ucm_store_load_params& p,
              const ucm::NamespaceDesc& d, ucm_task_t** task) {
  ucm::LoadDest dest;
  size_t np;
  if (p.dest_kind == UCM_DEST_CONTIGUOUS) {
    dest.kind = ucm::LoadDest::Kind::kContiguous;
    np = n;
  } else {
    dest.kind = ucm::LoadDest::Kind::kPaged;
    np = n * size_t(d.num_layers) * 2;
  }
  if (n && !p.ptrs) return fail(UCM_E_INVALID, "ucm_store_load: ptrs must not be NULL");
  dest.heads = {p.head_begin, p.head_end};
  dest.token_stride = p.token_stride;
  dest.head_stride = p.head_stride;
  if (np) dest.ptrs.assign(p.ptrs, p.ptrs + np);
  return finish_task(store->s->load(ns_of(ns), hashes_of(hashes), n, dest), task);
}

int load_device(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                const ucm_store_load_params& p, const ucm::NamespaceDesc& d, ucm_task_t** task) {
  if (p.token_stride || p.head_stride)
    return fail(UCM_E_INVALID, "ucm_store_load_ex: token_stride / head_stride are for UCM_DEST_PAGED only");
  if (!p.layer_caches || (n && !p.slots))
    return fail(UCM_E_INVALID, "ucm_store_load_ex: device kinds need layer_caches and slots");
  ucm::detail::DeviceDest dest;
  dest.layout = p.dest_kind == UCM_DEST_DEVICE_PAGED ? ucm::kernels::kLayoutNHD : ucm::kernels::kLayoutHND;
  dest.heads = {p.head_begin, p.head_end};
  dest.layer_caches.assign(p.layer_caches, p.layer_caches + size_t(d.num_layers) * 2);
  if (n) dest.slots.assign(p.slots, p.slots + n);
  dest.slot_stride = p.slot_stride;
  dest.device = p.device;
  dest.stream = p.stream;
  if (p.layer_events) dest.layer_events.assign(p.layer_events, p.layer_events + d.num_layers);
  dest.on_layer = p.on_layer;
  dest.on_layer_data = p.on_layer_data;
  std::shared_ptr<ucm::Task> t;
  ucm::Status s = ucm::detail::load_device(*store->s, ns_of(ns), hashes_of(hashes), n, std::move(dest), &t);
  if (!s.ok()) return fail(s);
  *task = new ucm_task{std::move(t)};
  return ok();
}

}  // namespace

UCM_API ucm_store_load_params ucm_store_default_load_params(void) {
  ucm_store_load_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.dest_kind = UCM_DEST_CONTIGUOUS;
  return p;
}

UCM_API int ucm_store_load_ex(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                              const ucm_store_load_params* params, ucm_task_t** task) {
  return guarded("ucm_store_load_ex", [&] {
    if (!store || !ns || !task || !params || (n && !hashes))
      return fail(UCM_E_INVALID, "ucm_store_load_ex: store, ns, hashes, params and task must not be NULL");
    *task = nullptr;
    ucm_store_load_params p = ucm_store_default_load_params();
    ucm::Status st = ucm::capi::read_struct("ucm_store_load_ex: params", params, p, &p);
    if (!st.ok()) return fail(st);
    ucm::NamespaceDesc d;
    ucm::Status s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    switch (p.dest_kind) {
      case UCM_DEST_CONTIGUOUS:
      case UCM_DEST_PAGED: return load_host(store, ns, hashes, n, p, d, task);
      case UCM_DEST_DEVICE_PAGED:
      case UCM_DEST_DEVICE_PAGED_HND: return load_device(store, ns, hashes, n, p, d, task);
      default:
        return fail(UCM_E_INVALID, "ucm_store_load: unknown dest_kind " + std::to_string(p.dest_kind) + " (use UCM_DEST_*)");
    }
  });
}

UCM_API int ucm_store_load(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n, int32_t dest_kind,
                           void* const* ptrs, uint32_t head_begin, uint32_t head_end, ucm_task_t** task) {
  if (dest_kind != UCM_DEST_CONTIGUOUS && dest_kind != UCM_DEST_PAGED) {
    if (task) *task = nullptr;
    return fail(UCM_E_INVALID, "ucm_store_load: unknown dest_kind " + std::to_string(dest_kind) +
                                   " (use UCM_DEST_CONTIGUOUS or UCM_DEST_PAGED; device kinds: ucm_store_load_ex)");
  }
  ucm_store_load_params p = ucm_store_default_load_params();
  p.dest_kind = dest_kind;
  p.ptrs = ptrs;
  p.head_begin = head_begin;
  p.head_end = head_end;
  return ucm_store_load_ex(store, ns, hashes, n, &p, task);
}

UCM_API int ucm_cuda_device_count(int* n) {
  return guarded("ucm_cuda_device_count", [&] {
    if (!n) return fail(UCM_E_INVALID, "ucm_cuda_device_count: n is NULL");
    *n = 0;
    const ucm_cuda_plugin* p = nullptr;
    ucm::Status s = ucm::detail::cuda_plugin(&p);
    if (!s.ok()) return fail(s);
    int count = 0;
    const int e = p->device_count(&count);
    // No device or no driver: the runtime says so with an error; that is 0 devices, not a failure.
    *n = e == 0 ? count : 0;
    return ok();
  });
}
