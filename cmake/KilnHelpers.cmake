# kiln_library(name SRCS_DIR dir DEPS ...): one target per src/ folder.
# Sources are globbed with CONFIGURE_DEPENDS so a new file needs no build edit.
# Folders that register things (ops, kernels, passes) pass REGISTRY: their archive is
# linked whole into every binary that uses it, so static registrars are never dropped
# by the linker (the target `name` is an interface over the archive `name_archive`).
function(kiln_library name)
  cmake_parse_arguments(ARG "REGISTRY" "" "DEPS;EXTRA_SRCS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  if(NOT srcs AND NOT ARG_EXTRA_SRCS)
    # A layer with headers only so far.
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
    return()
  elseif(ARG_REGISTRY)
    add_library(${name}_archive STATIC ${srcs} ${ARG_EXTRA_SRCS})
    target_include_directories(${name}_archive PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name}_archive PUBLIC ${ARG_DEPS})
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${name}_archive>")
    return()
  else()
    add_library(${name} STATIC ${srcs} ${ARG_EXTRA_SRCS})
  endif()
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# kiln_test(name SRCS ... DEPS ...): a GoogleTest binary registered with CTest.
function(kiln_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_SRCS)
    return()  # a test folder with no tests yet
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  kiln_share_test_precompiled_header(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}" ENVIRONMENT "KILN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# kiln_precompile_common_headers(target sources header...): parses the headers every source of
# a many-source target includes once, as a precompiled header, instead of once per source
# (GoogleTest, CLI11 and nlohmann/json: 15-20% of a test's or a subcommand's compile
# time; the build on CI's two cores is most of its budget). Targets of fewer than 8 sources
# keep their plain build: the precompiled header's own compile costs about what it saves them. KILN_PRECOMPILE_HEADERS=OFF turns it off (a
# check that every file includes what it uses).
option(KILN_PRECOMPILE_HEADERS "Precompile the common headers of many-source targets" ON)
function(kiln_precompile_common_headers target sources)
  list(LENGTH sources count)
  if(KILN_PRECOMPILE_HEADERS AND count GREATER_EQUAL 8)
    target_precompile_headers(${target} PRIVATE ${ARGN} <string> <vector> <memory> <functional>)
  endif()
endfunction()

# kiln_share_test_precompiled_header(target): every GoogleTest binary uses one precompiled
# header (GoogleTest and the standard headers above), built by the first test target and
# reused by the others (REUSE_FROM: test sources share their flags, and GCC takes the header
# under a -D it does not mention, such as a test's ONNX_ML or data directory; -Winvalid-pch,
# which CMake adds, would say otherwise). Most test binaries have one to six sources, too few
# to pay for a header of their own, so some 50 test sources parsed GoogleTest each, and the
# three that had one built it three times. With the shared header 19 test sources took 126.2 s
# CPU instead of 144.3 s (A/B, alternated, on a loaded machine; api/stream_test.cc 9.3 -> 7.3 s,
# core/status_test.cc 4.1 -> 2.3 s; none gains where ONNX's protobuf headers follow it).
# KILN_PRECOMPILE_HEADERS=OFF turns it off as above.
function(kiln_share_test_precompiled_header target)
  if(NOT KILN_PRECOMPILE_HEADERS)
    return()
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # Clang stops with an error where a precompiled header does not fit a source's flags
    # (GCC falls back to the headers' text); only GCC builds share the header.
    get_target_property(sources ${target} SOURCES)
    kiln_precompile_common_headers(${target} "${sources}" <gtest/gtest.h>)
    return()
  endif()
  get_property(owner GLOBAL PROPERTY KILN_TEST_PCH_OWNER)
  if(owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  else()
    target_precompile_headers(${target} PRIVATE
      <gtest/gtest.h> <string> <vector> <memory> <functional>)
    set_property(GLOBAL PROPERTY KILN_TEST_PCH_OWNER ${target})
  endif()
endfunction()
