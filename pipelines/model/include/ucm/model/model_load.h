// pipelines/model/include/ucm/model/model_load.h: loading a model for a run, the one place that resolves --device,
// --compute-dtype and --threads into what LlamaModel::load takes (precompute and the engine both
// load through it).
#pragma once
#include <memory>
#include <string>

#include "ucm/status.h"

namespace ucm::model {

class LlamaModel;

struct LoadOptions {
  std::string model_dir;              ///< Hugging Face model directory (config.json + safetensors)
  std::string device = "cpu";         ///< "cpu" | "cuda" | "cuda:N"
  std::string compute_dtype = "fp32"; ///< "fp32" | "bf16" | "auto" (choose_compute, compute.h)
  /// libtorch intra-op threads: -1 leaves them, 0 = set_compute_threads's default. On the fused bf16
  /// CPU path (LlamaModel::fused_bf16()) with batched_prefill: prefill workers of one libtorch
  /// thread each, 0 = every core.
  int threads = -1;
  /// The run's prefill is the batched forward() (precompute, its bench): on the fused bf16 CPU
  /// path, threads are prefill workers. false (the engine, whose cached forward keeps libtorch's
  /// ops): threads are libtorch's as for bf16 without the fused kernels.
  bool batched_prefill = true;
};

/// What a loaded model computes with.
struct ComputeInfo {
  std::string dtype;  ///< "bf16" | "fp32"
  std::string path;   ///< "amx_bf16" | "avx512_bf16" | "cuda" | "fp32"
  int threads = 0;    ///< libtorch intra-op threads in effect (the fused bf16 path: prefill workers)
  std::string kernels = "libtorch";  ///< kernels_of(the model)
  std::string blas_core;  ///< fp32 on the CPU: the OpenBLAS core running the GEMMs (blas_core_name()); else ""
  /// fp32 on the CPU: the environment's OPENBLAS_CORETYPE that blas_core replaced
  /// (blas_core_replaced()); "" when none was.
  std::string blas_core_replaced;
};

/// LlamaModel::kernels(): the row of the kernel table its layers run: "avx512_bf16" or "bf16_portable" (the bf16
/// kernels, ucm/kernels/cpu/bf16.h), "fp32_avx512" | "fp32_avx2" | "fp32_generic" (the fused fp32 kernels,
/// ucm/kernels/cpu/fp32.h), or "libtorch" (libtorch's ops).
std::string kernels_of(const LlamaModel& m);

/// Loads o.model_dir on o.device with the resolved compute dtype. Errors: InvalidArgument (no
/// directory, bad --device or --compute-dtype, a directory that is not a supported Llama-family
/// model: the message says how to fetch the default one), NotSupported (a CUDA device on a
/// libtorch without CUDA or without a visible GPU).
Status load_model(const LoadOptions& o, std::unique_ptr<LlamaModel>* out, ComputeInfo* info);

}  // namespace ucm::model
