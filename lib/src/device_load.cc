// lib/src/device_load.cc: see ucm/core/device_load.h.
#include "ucm/core/device_load.h"

#include <atomic>
#include <thread>

#include "ucm/core/cuda_plugin.h"
#include "ucm/core/task_impl.h"
#include "ucm/ucm.h"

namespace ucm::detail {
namespace {

// Layers scattered by each path in this process (scatter_path_counts).
std::atomic<uint64_t> g_copy_layers{0}, g_kernel_layers{0};

struct Job {
  const ucm_cuda_plugin* p = nullptr;
  std::shared_ptr<TaskImpl> task;
  std::shared_ptr<Task> inner;
  DeviceDest dest;
  kernels::ScatterArgs args;      // layer, dst_k, dst_v set per layer
  void* staging = nullptr;        // [n][block_bytes], then [n] int64 slots
  size_t staging_cap = 0;
  int64_t* staged_slots = nullptr;
};

struct LayerCall {
  void (*fn)(uint32_t, int, void*);
  void* data;
  uint32_t layer;
};

void layer_done(void* v) {
  std::unique_ptr<LayerCall> c(static_cast<LayerCall*>(v));
  c->fn(c->layer, UCM_OK, c->data);
}

// Last callback of the stream: the copies are done; staging back to the pool, task finished.
void job_done(void* v) {
  std::unique_ptr<std::shared_ptr<Job>> hold(static_cast<std::shared_ptr<Job>*>(v));
  Job& j = **hold;
  PinnedPool::get().give(j.staging, j.staging_cap);
  j.task->finish();
}

// Runs on its own thread: waits for the reads, then enqueues the layers.
void run(std::shared_ptr<Job> jp) {
  Job& j = *jp;
  (void)j.inner->wait(-1);
  const size_t n = j.task->statuses().size();
  for (size_t i = 0; i < n; ++i) {
    j.task->statuses()[i] = j.inner->block_status()[i];
    j.staged_slots[i] = j.task->statuses()[i].ok() ? j.dest.slots[i] : -1;
  }
  j.inner.reset();
  const ucm_cuda_plugin& p = *j.p;
  Status err = cuda_status(p, p.set_device(j.dest.device), "cudaSetDevice(" + std::to_string(j.dest.device) + ")");
  const uint32_t L = j.args.L;
  uint32_t l = 0;
  for (; err.ok() && l < L; ++l) {  // stops at the first failure
    j.args.layer = l;
    j.args.dst_k = j.dest.layer_caches[size_t(l) * 2];
    j.args.dst_v = j.dest.layer_caches[size_t(l) * 2 + 1];
    int used_copies = -1;
    err = cuda_status(p, p.scatter_layer(&j.args, j.dest.stream, &used_copies), "scatter of layer " + std::to_string(l));
    if (err.ok()) (used_copies == 1 ? g_copy_layers : g_kernel_layers).fetch_add(1, std::memory_order_relaxed);
    if (err.ok() && !j.dest.layer_events.empty())
      err = cuda_status(p, p.event_record(j.dest.layer_events[l], j.dest.stream),
                        "cudaEventRecord of layer " + std::to_string(l));
    if (err.ok() && j.dest.on_layer) {
      auto* c = new LayerCall{j.dest.on_layer, j.dest.on_layer_data, l};
      err = cuda_status(p, p.launch_host_func(j.dest.stream, layer_done, c), "cudaLaunchHostFunc");
      if (!err.ok()) delete c;
    }
    if (!err.ok()) break;  // l: the failed layer
  }
  if (!err.ok()) {
    // Layers from the failed one on are not (all) written: their blocks count as failed.
    for (auto& s : j.task->statuses())
      if (s.ok()) s = err;
    if (j.dest.on_layer)
      for (uint32_t k = l; k < L; ++k) j.dest.on_layer(k, int(err.code()), j.dest.on_layer_data);
  }
  auto* hold = new std::shared_ptr<Job>(jp);
  if (p.launch_host_func(j.dest.stream, job_done, hold) != 0) {
    (void)p.stream_sync(j.dest.stream);
    job_done(hold);
  }
}

}  // namespace

Status load_device(Store& store, const NamespaceId& ns, const BlockHash* hashes, size_t n, DeviceDest dest,
                   std::shared_ptr<Task>* out) {
  NamespaceDesc d;
  UCM_RETURN_IF_ERROR(store.get_namespace(ns, &d));
  const uint32_t h0 = dest.heads.begin, h1 = dest.heads.end == 0 ? d.num_kv_heads : dest.heads.end;
  const std::string where = "ucm_store_load_ex (device): ";
  if (h0 >= h1 || h1 > d.num_kv_heads)
    return Status::InvalidArgument(where + "KV-head range [" + std::to_string(h0) + ", " + std::to_string(h1) +
                                   ") is not within [0, " + std::to_string(d.num_kv_heads) + ")");
  if (dest.layout != kernels::kLayoutNHD && dest.layout != kernels::kLayoutHND)
    return Status::InvalidArgument(where + "unknown layout");
  const size_t L = d.num_layers;
  if (dest.layer_caches.size() != L * 2)
    return Status::InvalidArgument(where + "need " + std::to_string(L * 2) + " layer cache pointers ([L][2])");
  for (size_t k = 0; k < dest.layer_caches.size(); ++k)
    if (!dest.layer_caches[k]) return Status::InvalidArgument(where + "layer cache pointer " + std::to_string(k) + " is null");
  if (dest.slots.size() != n) return Status::InvalidArgument(where + "slots must hold n entries");
  if (!dest.layer_events.empty() && dest.layer_events.size() != L)
    return Status::InvalidArgument(where + "layer_events must hold L = " + std::to_string(L) + " events");
  for (void* e : dest.layer_events)
    if (!e) return Status::InvalidArgument(where + "a layer event is null");
  const uint64_t row = uint64_t(d.head_dim) * dtype_size(d.dtype), page = uint64_t(d.block_size) * (h1 - h0) * row;
  if (dest.slot_stride == 0) dest.slot_stride = page;
  if (dest.slot_stride < page)
    return Status::InvalidArgument(where + "slot_stride " + std::to_string(dest.slot_stride) + " is below a page (" +
                                   std::to_string(page) + " bytes: block_size x heads x head_dim x dtype)");
  if (n && !hashes) return Status::InvalidArgument(where + "hashes is null with n > 0");

  auto j = std::make_shared<Job>();
  Status s = cuda_device(dest.device, &j->p);
  if (!s.ok()) return Status(s.code(), where + s.message());
  j->task = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    j->task->finish();
    *out = j->task;
    return Status::OK();
  }
  const uint64_t block_bytes = d.payload_bytes();
  const size_t slots_off = (n * block_bytes + 63) & ~size_t{63};
  UCM_RETURN_IF_ERROR(PinnedPool::get().take(*j->p, slots_off + n * sizeof(int64_t), &j->staging, &j->staging_cap));
  j->staged_slots = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(j->staging) + slots_off);
  j->dest = std::move(dest);
  kernels::ScatterArgs& a = j->args;
  a.src = static_cast<const uint8_t*>(j->staging);
  a.slots = j->staged_slots;
  a.n = n;
  a.block_bytes = block_bytes;
  a.slot_stride = j->dest.slot_stride;
  a.L = uint32_t(L);
  a.T = d.block_size;
  a.H = d.num_kv_heads;
  a.h0 = h0;
  a.h1 = h1;
  a.row_bytes = uint32_t(row);
  a.layout = j->dest.layout;
  a.unit = 0;  // set per layer by the launcher (scatter_unit_for)
  LoadDest host;
  host.kind = LoadDest::Kind::kContiguous;
  for (size_t i = 0; i < n; ++i) host.ptrs.push_back(static_cast<uint8_t*>(j->staging) + i * block_bytes);
  j->inner = store.load(ns, hashes, n, host);
  *out = j->task;
  std::thread(run, j).detach();
  return Status::OK();
}

void scatter_path_counts(uint64_t* copy_layers, uint64_t* kernel_layers) {
  *copy_layers = g_copy_layers.load(std::memory_order_relaxed);
  *kernel_layers = g_kernel_layers.load(std::memory_order_relaxed);
}

}  // namespace ucm::detail
