# The CPU emulation (common/emulation/): modules 01-04 graded without a GPU.
#
# The same sources as the GPU build, compiled as C++ for the CPU:
#   * the harness (common/*.cpp) against the emulated CUDA runtime -> attn_common_emu;
#   * each emulated module's CUDA sources (its folder, its solution, common/device/) copied by
#     attn_emu_rewrite into ${ATTN_EMU_SOURCE_DIR} (launch syntax and __shared__ rewritten,
#     #line pointing back at the original), and compiled with the memory checks
#     (ATTN_EMU_CHECK_FLAGS) -> object libraries mNN_exercise_emu / mNN_solution_emu;
#   * the module's grader against them: grade_NN_cpu / check_NN_cpu, labelled
#     `cpu;emulated;exercise|solution;moduleNN` (so `ctest -LE exercise` runs the solutions);
#   * attn_emu: the `attn` CLI over the emulated modules (what `./course run NN` uses without
#     a GPU).
# Needs GCC or Clang (for the compiler-inserted memory checks); otherwise it is skipped with
# one line, and only the GPU graders exist.

set(ATTN_EMULATION_SUPPORTED OFF)
# The checks: the compiler's ThreadSanitizer instrumentation (a call before every load and
# store, with its address) without its runtime; common/emulation/runtime.cpp provides the
# functions it calls. -fno-tree-sra keeps a float4 access one 16-byte access (so that its
# alignment can be checked); no vectorizing, so that no access is wider than the source's.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(ATTN_EMU_CHECK_FLAGS
    -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -fno-tree-sra
    -fno-tree-vectorize -fno-tree-slp-vectorize -fno-store-merging
    -Wno-unknown-pragmas)  # `#pragma unroll` is nvcc's (GCC spells it `#pragma GCC unroll`)
  set(ATTN_EMULATION_SUPPORTED ON)
elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(ATTN_EMU_CHECK_FLAGS
    -fsanitize=thread -mllvm -tsan-instrument-func-entry-exit=0
    -mllvm -tsan-instrument-memintrinsics=0 -mllvm -tsan-instrument-atomics=0
    -fno-vectorize -fno-slp-vectorize)
  set(ATTN_EMULATION_SUPPORTED ON)
endif()
if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  set(ATTN_EMULATION_SUPPORTED OFF)
endif()
option(ATTN_EMULATION "build the CPU emulation of modules 01-04 (grade_NN_cpu, check_NN_cpu)" ON)
if(NOT ATTN_EMULATION)
  set(ATTN_EMULATION_SUPPORTED OFF)
endif()
# -O1: the checks make every load and store a call, so more optimization buys little speed and
# costs compile time; -g: the checks name source lines from the debug information.
list(APPEND ATTN_EMU_CHECK_FLAGS -O1 -g)

if(NOT ATTN_EMULATION_SUPPORTED)
  message(STATUS "attn: CPU emulation skipped (needs GCC or Clang on Linux; have "
                 "${CMAKE_CXX_COMPILER_ID} on ${CMAKE_SYSTEM_NAME})")
  function(attn_emulate_module)
  endfunction()
  return()
endif()

set(ATTN_EMU_SOURCE_DIR ${PROJECT_BINARY_DIR}/emulation/src)
set(ATTN_EMU_INCLUDE_DIR ${PROJECT_SOURCE_DIR}/common/emulation/include)

add_executable(attn_emu_rewrite common/emulation/rewrite.cpp)

add_library(attn_emu_runtime STATIC common/emulation/runtime.cpp)
target_include_directories(attn_emu_runtime BEFORE PUBLIC ${ATTN_EMU_INCLUDE_DIR})
target_include_directories(attn_emu_runtime PUBLIC ${PROJECT_SOURCE_DIR})
target_compile_definitions(attn_emu_runtime PUBLIC ATTN_EMULATION=1
                           PRIVATE ATTN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(attn_emu_runtime PUBLIC attn_warnings ${CMAKE_DL_LIBS})

add_library(attn_common_emu STATIC ${ATTN_COMMON_SOURCES})
target_link_libraries(attn_common_emu PUBLIC attn_emu_runtime Threads::Threads)
add_library(attn_cli_emu STATIC ${ATTN_CLI_SOURCES})
target_link_libraries(attn_cli_emu PUBLIC attn_common_emu CLI11::CLI11)
add_library(attn_test_support_emu STATIC tests/support.cpp)
target_link_libraries(attn_test_support_emu PUBLIC attn_common_emu doctest::doctest)
add_library(attn_test_main_emu STATIC tests/main_emu.cpp)
target_link_libraries(attn_test_main_emu PUBLIC attn_test_support_emu)

# Every CUDA source an emulated target may include, rewritten once; attn_emu_sources builds
# them all, and each emulated target depends on it.
set(_attn_emu_globs common/device/*.cuh tests/emulation/*.cu tests/emulation/*.cuh)
foreach(n 01 02 03 04)
  list(APPEND _attn_emu_globs modules/${n}_*/*.cu modules/${n}_*/*.cuh modules/${n}_*/*.h
       solutions/${n}_*/*.cu solutions/${n}_*/*.cuh)
endforeach()
file(GLOB _attn_emu_inputs CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR} ${_attn_emu_globs})
set(_attn_emu_outputs)
foreach(rel ${_attn_emu_inputs})
  set(out ${ATTN_EMU_SOURCE_DIR}/${rel})
  add_custom_command(OUTPUT ${out}
    COMMAND attn_emu_rewrite ${PROJECT_SOURCE_DIR}/${rel} ${out}
    DEPENDS attn_emu_rewrite ${PROJECT_SOURCE_DIR}/${rel}
    COMMENT "emulation: rewriting ${rel}" VERBATIM)
  list(APPEND _attn_emu_outputs ${out})
endforeach()
add_custom_target(attn_emu_sources DEPENDS ${_attn_emu_outputs})

# attn_emu_object_library(target source.cu... [PLAIN plain.cpp...]): an object library of
# CUDA sources (paths relative to the source tree, compiled from their rewritten copies with
# the memory checks) and plain C++ files (compiled as they are), against the emulation.
function(attn_emu_object_library target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "PLAIN")
  set(sources)
  foreach(rel ${ARG_UNPARSED_ARGUMENTS})
    set(out ${ATTN_EMU_SOURCE_DIR}/${rel})
    set_source_files_properties(${out} PROPERTIES LANGUAGE CXX GENERATED TRUE
                                COMPILE_OPTIONS "${ATTN_EMU_CHECK_FLAGS}")
    list(APPEND sources ${out})
  endforeach()
  add_library(${target} OBJECT ${sources} ${ARG_PLAIN})
  add_dependencies(${target} attn_emu_sources)
  target_include_directories(${target} BEFORE PRIVATE ${ATTN_EMU_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC attn_common_emu)
endfunction()

# attn_emulate_module(NN name): mNN_{exercise,solution}_emu and grade_NN_cpu / check_NN_cpu.
function(attn_emulate_module number name)
  set(dir ${number}_${name})
  if(EXISTS ${PROJECT_SOURCE_DIR}/modules/${dir}/exercise.cpp)  # a CPU module: for attn_emu
    foreach(impl exercise solution)
      if(impl STREQUAL "exercise")
        set(source ${PROJECT_SOURCE_DIR}/modules/${dir}/exercise.cpp)
      else()
        set(source ${PROJECT_SOURCE_DIR}/solutions/${dir}/solution.cpp)
      endif()
      add_library(m${number}_${impl}_emu OBJECT ${source}
                  ${PROJECT_SOURCE_DIR}/modules/${dir}/register.cpp)
      target_compile_definitions(m${number}_${impl}_emu PRIVATE ATTN_IMPL=${impl})
      target_link_libraries(m${number}_${impl}_emu PUBLIC attn_common_emu)
      set_property(GLOBAL APPEND PROPERTY ATTN_EMU_MODULE_OBJECT_LIBRARIES m${number}_${impl}_emu)
    endforeach()
    return()
  endif()
  foreach(impl exercise solution)
    if(impl STREQUAL "exercise")
      set(rel modules/${dir}/exercise.cu)
      set(test_name grade_${number}_cpu)
    else()
      set(rel solutions/${dir}/solution.cu)
      set(test_name check_${number}_cpu)
    endif()
    # The going-further stubs (or their answers) next to it, as in attn_add_module.
    get_filename_component(rel_dir ${rel} DIRECTORY)
    if(EXISTS ${PROJECT_SOURCE_DIR}/${rel_dir}/further.cu)
      list(APPEND rel ${rel_dir}/further.cu)
    endif()
    set(lib m${number}_${impl}_emu)
    attn_emu_object_library(${lib} ${rel} PLAIN ${PROJECT_SOURCE_DIR}/modules/${dir}/register.cpp)
    target_compile_definitions(${lib} PRIVATE ATTN_IMPL=${impl})
    set_property(GLOBAL APPEND PROPERTY ATTN_EMU_MODULE_OBJECT_LIBRARIES ${lib})

    add_executable(${test_name} ${PROJECT_SOURCE_DIR}/tests/test_${dir}.cpp)
    target_link_libraries(${test_name} PRIVATE ${lib} attn_test_main_emu)
    target_compile_definitions(${test_name} PRIVATE ATTN_IMPL=${impl})
    add_test(NAME ${test_name} COMMAND ${test_name})
    set_tests_properties(${test_name} PROPERTIES
      LABELS "cpu;emulated;${impl};module${number}" SKIP_RETURN_CODE 77 TIMEOUT 900)
  endforeach()
endfunction()
