// pipelines/precompute/compute_report.h: what a report says about the compute that ran.
#pragma once
#include "ucm/model/model_load.h"

namespace ucm::precompute {

/// Copies the loaded model's ComputeInfo into a report's compute fields (PrecomputeSummary,
/// BenchResult: compute_dtype, compute_path, threads, kernels, blas_core, blas_core_replaced).
template <class Report>
void set_compute(const model::ComputeInfo& c, Report* r) {
  r->compute_dtype = c.dtype;
  r->compute_path = c.path;
  r->threads = c.threads;
  r->kernels = c.kernels;
  r->blas_core = c.blas_core;
  r->blas_core_replaced = c.blas_core_replaced;
}

}  // namespace ucm::precompute
