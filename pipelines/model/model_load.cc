// pipelines/model/model_load.cc: see model_load.h.
#include "ucm/model/model_load.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "ucm/model/compute.h"
#include "ucm/model/llama_model.h"

namespace ucm::model {

std::string kernels_of(const LlamaModel& m) { return m.kernels(); }

Status load_model(const LoadOptions& o, std::unique_ptr<LlamaModel>* out, ComputeInfo* info) {
  if (o.model_dir.empty()) return Status::InvalidArgument("no model directory: pass --model DIR");
  torch::Device dev = torch::kCPU;
  try {
    dev = torch::Device(o.device);
  } catch (const std::exception&) {
    return Status::InvalidArgument("--device " + o.device + ": use cpu, cuda or cuda:N");
  }
  if (dev.is_cuda() && !torch::cuda::is_available())
    return Status::NotSupported("--device " + o.device +
                                ": this libtorch has no CUDA or sees no GPU (Debian's libtorch is CPU-only; build "
                                "ucm with PyTorch's CUDA libtorch: CMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
                                "print(torch.utils.cmake_prefix_path)'), docs/precompute.md)");
  if (!dev.is_cpu() && !dev.is_cuda()) return Status::InvalidArgument("--device " + o.device + ": use cpu, cuda or cuda:N");
  ComputeChoice cc;
  try {
    cc = choose_compute(o.compute_dtype, dev);
  } catch (const std::invalid_argument& e) {
    return Status::InvalidArgument(std::string("--compute-dtype: ") + e.what());
  }
  if (o.threads < -1) return Status::InvalidArgument("--threads must be >= 0 (0: the default for the compute dtype)");
  int threads = o.threads >= 0 ? set_compute_threads(o.threads, dev.is_cpu() && cc.dtype == torch::kFloat)
                                     : at::get_num_threads();
  try {
    *out = LlamaModel::load(o.model_dir, dev, cc.dtype);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("cannot load model from ") + o.model_dir + ": " + e.what() +
                                   " (a Hugging Face Llama-family directory is required; for the default model run "
                                   "scripts/fetch_model.py)");
  }
  const bool fp32_cpu = dev.is_cpu() && cc.dtype == torch::kFloat;
  if (o.threads >= 0 && o.batched_prefill && ((*out)->fused_bf16() || (fp32_cpu && !(*out)->fused_fp32().empty()))) {
    // The fused CPU prefill runs data parallel: --threads workers (0: every core), each with one
    // libtorch thread (LlamaModel::set_prefill_workers says why); at fp32 each worker's GEMMs run
    // on OpenBLAS in the worker's own thread (set_blas_threads(1)). UCM_FP32_KERNELS=0 keeps fp32
    // as it was before the kernels: one libtorch thread, OpenBLAS's own threads for the GEMMs.
    threads = o.threads > 0 ? o.threads : usable_cores();
    at::set_num_threads(1);
    if (fp32_cpu) set_blas_threads(1);
    (*out)->set_prefill_workers(threads);
  }
  const std::string blas_core = blas_core_of(dev, cc.dtype);
  if (!blas_core.empty()) {
    const std::string warn = blas_core_warning();
    if (!warn.empty()) spdlog::warn("{}", warn);
    const std::string note = blas_core_replaced_note();
    if (!note.empty()) spdlog::info("{}", note);
  }
  if (info) *info = {cc.name, cc.path, threads, kernels_of(**out), blas_core, blas_core.empty() ? "" : blas_core_replaced()};
  return Status::OK();
}

}  // namespace ucm::model
