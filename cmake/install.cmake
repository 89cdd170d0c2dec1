# `cmake --install BUILD [--prefix P]`: libucm.so (with its SOVERSION), the C ABI headers
# (UCM_PUBLIC_HEADERS: every header of lib/include/ucm, and the generated ucm/version.h),
# ucmConfig.cmake (find_package(ucm) -> ucm::ucm), ucm.pc, the `ucm` binary and the `ucm-torch`
# binary it runs for its libtorch subcommands. The C++ API (lib/cxx/include, ucm_core) is internal
# and not installed. docs/library.md lists the installed headers.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ucm EXPORT ucmTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(UCM_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/lib/include/ucm/ucm.h ${PROJECT_SOURCE_DIR}/lib/include/ucm/retrieval.h
                       ${PROJECT_SOURCE_DIR}/lib/include/ucm/blend.h ${PROJECT_SOURCE_DIR}/lib/include/ucm/corpus.h
                       ${UCM_GENERATED_INCLUDE}/ucm/version.h)
install(FILES ${UCM_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ucm)
install(EXPORT ucmTargets NAMESPACE ucm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ucm)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ucmConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/ucmConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ucm)
# 0.x: every minor version may change the ABI (the SOVERSION is MAJOR.MINOR); from 1.0 on, the
# major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_ucm_compat SameMinorVersion)
else()
  set(_ucm_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/ucmConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ${_ucm_compat})
install(FILES ${CMAKE_BINARY_DIR}/cmake/ucmConfig.cmake ${CMAKE_BINARY_DIR}/cmake/ucmConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ucm)
# ucm.pc: configured now, its prefix (%PREFIX%) filled in at install time, so that
# `cmake --install BUILD --prefix P` gives a ucm.pc for P.
configure_file(${PROJECT_SOURCE_DIR}/cmake/ucm.pc.in ${CMAKE_BINARY_DIR}/cmake/ucm.pc.in @ONLY)
install(CODE "
  file(READ \"${CMAKE_BINARY_DIR}/cmake/ucm.pc.in\" _pc)
  string(REPLACE \"%PREFIX%\" \"\${CMAKE_INSTALL_PREFIX}\" _pc \"\${_pc}\")
  file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/ucm.pc\" \"\${_pc}\")
  message(STATUS \"Installing: \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/ucm.pc\")
")
if(TARGET ucm_cli)
  install(TARGETS ucm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET ucm_cuda)  # dlopened by libucm for device loads (ucm_store_load_ex), beside it
  install(TARGETS ucm_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET ucm_torch_cli)  # run by `ucm` for its libtorch subcommands (cmd/torch_commands.h)
  install(TARGETS ucm_torch_cli RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ucm)
endif()
