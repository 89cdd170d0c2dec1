// tests/common/capi_store.h: a fixture for tests that write a store with the C++ API (ucm_core)
// and read it through the C ABI (libucm.so). Header-only; links with ucm and ucm_core.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "store_blocks.h"
#include "temp_dir.h"
#include "ucm/ucm.h"

namespace ucm::test {

/// A store of its own for each test (<temp dir>/<prefix><n>_<pid>): SetUp creates it, has write()
/// fill it through a read-write ucm::Store, closes that and opens `ro` on it through the C ABI
/// (read-only, 2 I/O threads, no refresh); TearDown closes `ro` and removes the store.
class CApiStoreTest : public ::testing::Test {
 protected:
  explicit CApiStoreTest(const std::string& prefix) {
    static int n = 0;
    path = tmpdir(prefix, std::to_string(n++));
  }
  /// What the test's store holds, written through `s`.
  virtual void write(Store* s) = 0;
  void SetUp() override {
    {
      auto s = open_test_store(path, /*rw=*/true, /*create=*/true);
      ASSERT_TRUE(s);
      ASSERT_NO_FATAL_FAILURE(write(s.get()));
    }
    ucm_store_open_params p = ucm_store_default_open_params();
    p.io_threads = 2;
    p.refresh_interval_ms = 0;
    ASSERT_EQ(ucm_store_open(path.c_str(), &p, &ro), UCM_OK) << ucm_last_error();
  }
  void TearDown() override {
    ucm_store_close(ro);
    std::filesystem::remove_all(path);
  }

  std::string path;
  ucm_store_t* ro = nullptr;
};

}  // namespace ucm::test
