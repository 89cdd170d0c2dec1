// tests/common/model_test_main.cc: main() of the test binaries that run the model in process
// (libtorch): OpenBLAS's fp32 kernels for this CPU first (ucm::model::restart_with_blas_core, as
// ucm-torch does), then GoogleTest.
#include <gtest/gtest.h>

#include "compute.h"

int main(int argc, char** argv) {
  ucm::model::restart_with_blas_core(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
