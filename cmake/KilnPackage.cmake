# The Kiln package: libkiln.so (the C API as a shared library), install rules, and the
# files a user's project finds it by: a CMake package config (find_package(kiln) gives
# kiln::kiln) and a pkg-config file (kiln.pc). Included from the top-level CMakeLists
# after every layer, so the runtime and the kiln command exist as targets.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# libkiln.so.0 -> libkiln.so.0.1.0: the C API layer (src/capi) and what it exposes. The capi
# and LLM objects go into the library itself, not the kiln_capi and kiln_llm archives: those
# depend on kiln_runtime, which is linked whole here (so the op and kernel archives, through
# kiln_runtime's kiln_ops and kiln_kernels, are whole and their registries complete), and
# CMake refuses the same archive whole and plain. They are the archives' own object files
# (the tree is position-independent), so each source is compiled once for both. Single-
# operator mode brings the compiler into libkiln.so, since an op is compiled on its first
# call. The fast kernels make libkiln.so depend on the system's libdnnl.so.2 (oneDNN,
# libdnnl-dev at build time, scripts/install-deps.sh). kiln.map exports the kiln* C
# functions only.
add_library(kiln_shared SHARED ${PROJECT_SOURCE_DIR}/src/capi/kiln_c_abi.c
            $<TARGET_OBJECTS:kiln_capi> $<TARGET_OBJECTS:kiln_llm>)
add_library(kiln::kiln ALIAS kiln_shared)
target_link_libraries(kiln_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,kiln_runtime>")
# The communication library, whole like the runtime (it names no link dependency on
# kiln_runtime: src/comm/CMakeLists.txt).
target_link_libraries(kiln_shared PRIVATE kiln_comm kiln_compiler nlohmann_json::nlohmann_json)
target_include_directories(kiln_shared
  PRIVATE ${PROJECT_SOURCE_DIR}/include
  INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
            $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(kiln_shared PROPERTIES
  OUTPUT_NAME kiln
  EXPORT_NAME kiln
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  C_STANDARD 11
  C_STANDARD_REQUIRED ON
  LINKER_LANGUAGE CXX
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/kiln.map)
target_link_options(kiln_shared PRIVATE "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/kiln.map")
# Every symbol must resolve when the library is linked, not when a user loads it. (Not
# under sanitizers: their runtimes are supplied by the executable.)
if(NOT KILN_SANITIZE AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  target_link_options(kiln_shared PRIVATE "LINKER:--no-undefined")
endif()

# ---- install ---------------------------------------------------------------------------
install(TARGETS kiln_shared EXPORT kilnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kiln/kiln.h ${PROJECT_SOURCE_DIR}/include/kiln/kiln.hpp
              ${PROJECT_SOURCE_DIR}/include/kiln/comm.h ${PROJECT_SOURCE_DIR}/include/kiln/kiln_op.h
              ${PROJECT_SOURCE_DIR}/include/kiln/custom_op.h
              ${PROJECT_SOURCE_DIR}/include/kiln/llm.h ${PROJECT_SOURCE_DIR}/include/kiln/llm.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
if(TARGET kiln)
  install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/kilnConfig.cmake
  INSTALL_DESTINATION ${KILN_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: minor versions may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/kilnConfig.cmake
              ${CMAKE_BINARY_DIR}/package/kilnConfigVersion.cmake
  DESTINATION ${KILN_CMAKE_DIR})

# kiln.pc finds its prefix relative to its own directory (${pcfiledir}), so the package
# works wherever `cmake --install --prefix` puts it.
file(RELATIVE_PATH KILN_PC_PREFIX_FROM_PCDIR
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" KILN_PC_PREFIX_FROM_PCDIR "${KILN_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in ${CMAKE_BINARY_DIR}/package/kiln.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
