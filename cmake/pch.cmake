# Precompiled headers (option UCM_PCH, default ON). Included by the top-level CMakeLists.txt after
# every target is defined, so the choice of headers lives in one place.
#
# A libtorch unit spends about half its compile time on <torch/torch.h> (about 350,000
# preprocessed lines; llama_cache.cc: 35 s of CPU without the PCH, 16 s with it): each libtorch
# library compiles it once into a PCH. A reuse across targets needs the same flags (CMake adds
# -Winvalid-pch, which -Werror makes an error): executables are -fPIE where libraries are -fPIC,
# so the test binaries (one or three units each) do not reuse the libraries' PCH.
option(UCM_PCH "Precompile the libtorch and RocksDB headers (faster builds)" ON)
if(NOT UCM_PCH)
  return()
endif()

# (A GCC PCH of <torch/torch.h> is about 780 MB: two of them, not one per target.)
if(UCM_HAVE_TORCH)
  foreach(t ucm_model ucm_precompute)
    if(TARGET ${t})
      target_precompile_headers(${t} PRIVATE <torch/torch.h>)
    endif()
  endforeach()
  # Same flags and definitions as ucm_precompute's.
  if(TARGET ucm_generate AND TARGET ucm_precompute)
    target_precompile_headers(ucm_generate REUSE_FROM ucm_precompute)
  endif()
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
