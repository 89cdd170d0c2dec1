# Precompiled headers (option UCM_PCH, default ON). Included by the top-level CMakeLists.txt after
# every target is defined, so the choice of headers lives in one place.
#
# A libtorch unit spends about half its compile time on <torch/torch.h> (about 350,000
# preprocessed lines; llama_cache.cc: 35 s of CPU without the PCH, 16 s with it): ucm_model
# compiles it once into a PCH that the other libtorch libraries reuse. A reuse needs the same flags
# and definitions (CMake adds -Winvalid-pch, which -Werror makes an error): executables are -fPIE
# where libraries are -fPIC, so the test binaries have one of their own (below).
option(UCM_PCH "Precompile the libtorch and RocksDB headers (faster builds)" ON)
if(NOT UCM_PCH)
  return()
endif()

# One GCC PCH of <torch/torch.h> (about 780 MB, 34 s of CPU), built by ucm_model and reused by the
# other libtorch libraries, which have the same flags and definitions and link ucm_model (so it is
# built first).
if(UCM_HAVE_TORCH AND TARGET ucm_model)
  # <ATen/core/ivalue.h> first: Clang 14 in C++20 instantiates std::vector<c10::IValue>'s
  # constexpr destructor where ATen/core/List.h declares one before IValue is complete, and fails
  # (GCC does not); with IValue defined first, <torch/torch.h> compiles under both.
  target_precompile_headers(ucm_model PRIVATE <ATen/core/ivalue.h> <torch/torch.h>)
  foreach(t ucm_precompute ucm_generate)
    if(TARGET ${t})
      target_precompile_headers(${t} REUSE_FROM ucm_model)
    endif()
  endforeach()
endif()

# The test units that include libtorch: <torch/torch.h> alone is 14 s of CPU per unit; with one
# PCH of it and <gtest/gtest.h> (31 s to build) each such unit takes 9 s less (test_blend.cc 28.5 ->
# 19.2 s, test_skipped_entries.cc 29.8 -> 20.5 s; GCC 12, 2026-11-29). The PCH is compiled by an
# object library with the test executables' flags (-fPIE, not a library's -fPIC) and the usage
# requirements of ucm_model and GoogleTest; -Winvalid-pch (and -Werror) make a mismatch an error,
# never a silent full compile. A unit of those targets that does not include libtorch skips it
# (loading 650 MB of PCH costs it more than it saves).
set(_ucm_torch_test_targets test_blend test_compute_dtype test_family_parity test_fp32_kernels test_model_parity
    test_precompute)
if(UCM_HAVE_TORCH AND TARGET ucm_model AND TARGET test_blend)
  find_package(GTest REQUIRED)  # its imported targets are scoped to tests/, where it was found
  file(WRITE ${CMAKE_BINARY_DIR}/ucm_test_torch_pch.cc "// The host of the libtorch tests' PCH (cmake/pch.cmake).\n")
  add_library(ucm_test_torch_pch OBJECT ${CMAKE_BINARY_DIR}/ucm_test_torch_pch.cc)
  set_target_properties(ucm_test_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(ucm_test_torch_pch PRIVATE -fPIE)
  target_link_libraries(ucm_test_torch_pch PRIVATE ucm_model GTest::gtest ucm_warnings)
  target_precompile_headers(ucm_test_torch_pch PRIVATE <ATen/core/ivalue.h> <torch/torch.h> <gtest/gtest.h>)
  foreach(t ${_ucm_torch_test_targets})
    if(TARGET ${t})
      target_precompile_headers(${t} REUSE_FROM ucm_test_torch_pch)
    endif()
  endforeach()
  # The one unit of those targets that includes no libtorch.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/tests/precompute/test_precompute_cli.cc
                              TARGET_DIRECTORY test_precompute PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endif()

# The other multi-unit targets: the C++ standard library headers that most units include (about
# 80,000 preprocessed lines in C++20), plus nlohmann/json and spdlog where the target uses them.
# (Test binaries are one unit each, the three cmd/ binaries two to four: a PCH of their own would
# cost what it saves.)
set(_ucm_pch_std <algorithm> <atomic> <chrono> <cstdint> <cstring> <filesystem> <functional> <map>
    <memory> <mutex> <optional> <set> <string> <string_view> <thread> <unordered_map> <vector>)
foreach(t ucm_format_store ucm_tokenizer)
  if(TARGET ${t})
    target_precompile_headers(${t} PRIVATE ${_ucm_pch_std})
  endif()
endforeach()
foreach(t ucm_core ucm ucm_admin ucm_bench ucm_cli_units)
  if(TARGET ${t})
    target_precompile_headers(${t} PRIVATE ${_ucm_pch_std} <nlohmann/json.hpp> <spdlog/spdlog.h>)
  endif()
endforeach()
