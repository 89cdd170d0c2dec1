# Unity builds (option UCM_UNITY, default ON) for the multi-unit targets that do not include
# libtorch: CMake compiles their sources in batches of 8 per translation unit, so the headers
# every unit parses (RocksDB, nlohmann/json, spdlog, CLI11, the standard library) are parsed once
# per batch. Measured (2 cores, -j2, RelWithDebInfo, PCH on, 2026-11-27): ucm_core from scratch
# 58.9 s wall / 109 s CPU plain, 35.3 s / 67 s unity. The libtorch targets are left alone (their
# <torch/torch.h> is already a PCH, and a batch there would hold gigabytes of compiler memory).
# A change to one file recompiles its batch: developers who rebuild often may prefer
# -DUCM_UNITY=OFF. Sources of a batch share a translation unit, so file-local names (anonymous
# namespaces, static functions) must differ between files of one target.
option(UCM_UNITY "Unity builds for the multi-unit targets without libtorch (faster from-scratch builds)" ON)
if(NOT UCM_UNITY)
  return()
endif()
foreach(t ucm_format_store ucm_core ucm_admin ucm_bench ucm_tokenizer ucm_cli_units)
  if(TARGET ${t})
    set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endforeach()
