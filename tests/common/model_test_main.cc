// tests/common/model_test_main.cc: main() of the test binaries that run the model in process
// (libtorch): OpenBLAS's fp32 kernels for this CPU first (ucm::model::restart_with_blas_core, as
// ucm-torch does), then GoogleTest.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ucm/model/cpu_runtime.h"

int main(int argc, char** argv) {
  ucm::model::restart_with_blas_core(argv, false);  // the environment's (or ctest's) OPENBLAS_CORETYPE runs
  if (const std::string conflict = ucm::model::cxx_runtime_conflict(); !conflict.empty()) {
    std::fprintf(stderr, "%s\n", conflict.c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
