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
# The libtorch targets and the three binaries, in batches of 7. A libtorch unit spends most of its
# time compiling the inline functions of libtorch's headers that it uses (eval_blend.cc: 2.4 s
# parsing with the PCH, 7.2 s instantiating, 12.4 s optimising and emitting), and a batch compiles
# each of them once: ucm_generate's 11 units other than engine.cc took 165 s of CPU one by one and
# 32.7 s as one unit (1.7 GB of compiler memory; 2 cores, GCC 12, 2026-11-29). The kernel sources
# with options of their own (cpu_bf16*.cc, cpu_fp32_<isa>.cc: -ffp-contract=off) stay out of the
# batches (CMake leaves out a source with COMPILE_OPTIONS).
foreach(t ucm_model ucm_precompute ucm_generate ucm_cli ucm_torch_cli ucm_admin_cli)
  if(TARGET ${t})
    set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 7)
  endif()
endforeach()
