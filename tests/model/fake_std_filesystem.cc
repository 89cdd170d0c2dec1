// tests/model/fake_std_filesystem.cc: a shared library that exports its own
// std::filesystem::remove_all(const path&, error_code&), as a pip PyTorch's libtorch.so exports a
// copy of libstdc++'s (pipelines/model/include/ucm/model/cpu_runtime.h, cxx_runtime_conflict). It removes nothing and
// counts its calls, so a test sees which copy a call reached.
#include <cstdint>
#include <filesystem>
#include <system_error>

extern "C" {
__attribute__((visibility("default"))) int ucm_fake_remove_all_calls = 0;
}

namespace std::filesystem {
__attribute__((visibility("default"))) uintmax_t remove_all(const path&, error_code& ec) {
  ++ucm_fake_remove_all_calls;
  ec.clear();
  return 4242;
}
}  // namespace std::filesystem
