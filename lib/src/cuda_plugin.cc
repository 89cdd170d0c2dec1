// lib/src/cuda_plugin.cc: see ucm/core/cuda_plugin.h.
#include "ucm/core/cuda_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>


namespace ucm::detail {
namespace {

struct Loaded {
  const ucm_cuda_plugin* table = nullptr;
  Status status;
};

std::string libucm_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_plugin), &info) == 0 || !info.dli_fname) return "";
  std::string p = info.dli_fname;
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash + 1);
}

Loaded load() {
  Loaded r;
  std::vector<std::string> tries;
  if (const char* env = std::getenv("UCM_CUDA_PLUGIN"); env && *env) {
    tries.emplace_back(env);
  } else {
    const std::string name = UCM_CUDA_PLUGIN_NAME;  // libucm_cuda.so.<SOVERSION>, lib/CMakeLists.txt
    // Beside the object holding this code: libucm.so, or a binary that links ucm_core statically
    // (the `ucm` CLI: then its ../lib, where the build tree and installs put the libraries).
    const std::string dir = libucm_dir();
    if (!dir.empty()) {
      tries.push_back(dir + name);
      tries.push_back(dir + "../lib/" + name);
      tries.push_back(dir + "../" UCM_INSTALL_LIBDIR "/" + name);
    }
    tries.push_back(name);
  }
  std::string errors;
  for (const auto& path : tries) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      errors += "\n  " + path + ": " + (e ? e : "dlopen failed");
      continue;
    }
    auto fn = reinterpret_cast<ucm_cuda_plugin_fn>(dlsym(h, UCM_CUDA_PLUGIN_SYMBOL));
    const ucm_cuda_plugin* t = fn ? fn() : nullptr;
    if (!t || t->struct_size != sizeof(ucm_cuda_plugin) || t->abi_version != kernels::kUcmCudaPluginAbi) {
      errors += "\n  " + path + ": not a ucm CUDA plugin of ABI " + std::to_string(kernels::kUcmCudaPluginAbi);
      dlclose(h);
      continue;
    }
    r.table = t;  // kept loaded for the process
    return r;
  }
  r.status = Status::NotSupported(
      "device destinations need libucm_cuda.so (built with ucm when nvcc is found, -DUCM_CUDA=ON) and a CUDA "
      "driver; tried:" + errors);
  return r;
}

}  // namespace

Status cuda_plugin(const ucm_cuda_plugin** out) {
  static const Loaded loaded = load();
  *out = loaded.table;
  return loaded.status;
}

Status cuda_device(int device, const ucm_cuda_plugin** out) {
  UCM_RETURN_IF_ERROR(cuda_plugin(out));
  int count = 0;
  const int e = (*out)->device_count(&count);
  if (e != 0 || device < 0 || device >= count)
    return Status::NotSupported("CUDA device " + std::to_string(device) + " is not available (" +
                                std::to_string(e ? 0 : count) + " devices" +
                                (e ? std::string("; cudaGetDeviceCount: ") + (*out)->error_string(e) : "") + ")");
  return Status::OK();
}

Status cuda_status(const ucm_cuda_plugin& p, int err, const std::string& call) {
  if (err == 0) return Status::OK();
  return Status::IOError(call + ": " + p.error_string(err) + " (cudaError_t " + std::to_string(err) + ")");
}

PinnedPool& PinnedPool::get() {
  static PinnedPool* pool = new PinnedPool;  // never destroyed: buffers may come back at exit
  return *pool;
}

Status PinnedPool::take(const ucm_cuda_plugin& p, size_t bytes, void** out, size_t* cap) {
  std::vector<void*> release;
  {
    std::lock_guard<std::mutex> g(mu_);
    release.swap(release_);
  }
  for (void* r : release) (void)p.host_free(r);
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& f = free_;
    size_t best = f.size();
    for (size_t i = 0; i < f.size(); ++i)
      if (f[i].second >= bytes && (best == f.size() || f[i].second < f[best].second)) best = i;
    if (best < f.size()) {
      *out = f[best].first;
      *cap = f[best].second;
      f.erase(f.begin() + std::ptrdiff_t(best));
      return Status::OK();
    }
  }
  // Round up to 2 MiB so that slightly different loads share buffers.
  const size_t want = (bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  void* ptr = nullptr;
  Status s = cuda_status(p, p.host_alloc(want, &ptr), "cudaHostAlloc of " + std::to_string(want) + " bytes");
  if (!s.ok()) return s;
  *out = ptr;
  *cap = want;
  return Status::OK();
}

void PinnedPool::give(void* ptr, size_t cap) {
  std::lock_guard<std::mutex> g(mu_);
  auto& f = free_;
  if (f.size() < kKeep) {
    f.emplace_back(ptr, cap);
    return;
  }
  // Full: keep the larger buffers. The other is freed by the next take(), on a thread that may
  // call CUDA (this may run in a stream callback, which may not).
  size_t small = 0;
  for (size_t i = 1; i < f.size(); ++i)
    if (f[i].second < f[small].second) small = i;
  if (f[small].second < cap) {
    release_.push_back(f[small].first);
    f[small] = {ptr, cap};
  } else {
    release_.push_back(ptr);
  }
}

}  // namespace ucm::detail
