# Precompiled headers (option UCM_PCH, default ON). Included by the top-level CMakeLists.txt after
# every target is defined, so the choice of headers lives in one place.
#
# A libtorch unit spends about half its compile time on <torch/torch.h> (about 350,000
# preprocessed lines; llama_cache.cc: 35 s of CPU without the PCH, 16 s with it): ucm_model
# compiles it once into a PCH that the other libtorch libraries reuse. A reuse needs the same flags
# and definitions (CMake adds -Winvalid-pch, which -Werror makes an error): executables are -fPIE
# where libraries are -fPIC, so the test binaries do not reuse it. (A PCH of their own, tried
# 2026-11-29: 40 s of CPU saved over the 13 libtorch test units, and units that do not include
# libtorch got slower by loading it: not kept.)
option(UCM_PCH "Precompile the libtorch and RocksDB headers (faster builds)" ON)
if(NOT UCM_PCH)
  return()
endif()

# One GCC PCH of <torch/torch.h> (about 780 MB, 34 s of CPU), built by ucm_model and reused by the
# other libtorch libraries, which have the same flags and definitions and link ucm_model (so it is
# built first).
if(UCM_HAVE_TORCH AND TARGET ucm_model)
  target_precompile_headers(ucm_model PRIVATE <torch/torch.h>)
  foreach(t ucm_precompute ucm_generate)
    if(TARGET ${t})
      target_precompile_headers(${t} REUSE_FROM ucm_model)
    endif()
  endforeach()
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
