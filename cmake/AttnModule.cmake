# attn_add_module(NN name [EMULATED] [SM90A] [CUTE] [LIBS lib...]): builds module NN_name from
#   modules/NN_name/exercise.cu|.cpp + register.cpp   -> object library mNN_exercise
#   solutions/NN_name/solution.cu|.cpp + register.cpp -> object library mNN_solution
# (with further.cu|.cpp from the same folder when there is one: the lesson's going-further
# stubs, and their answers)
# (the same sources compile with ATTN_IMPL=exercise / solution, so the symbols do not clash),
# and the grader tests/test_NN_name.cpp against each: grade_NN (exercise), check_NN (solution).
# A module with a host grader, tests/test_NN_name_host.cpp (checks that need no GPU, such as
# the layouts a CuTe module computes on the CPU), gets it built against each too:
# grade_NN_host and check_NN_host, labelled `cpu`, linked with the CPU doctest main.
# A module whose forward() runs on the CPU is labelled `cpu`, the others `gpu`:
#   attn_add_module(00 reference)   -- CPU: decided by the exercise being a .cpp file
# Optional:
#   LIBS lib...   extra libraries for the module's grader, e.g. cuBLAS for a comparison:
#                 attn_add_module(05 batched_gemm LIBS CUDA::cublas). They are not linked
#                 into the module libraries (so not into `attn`): forward() must not need them.
#   EMULATED      also build the module for the CPU emulation (cmake/AttnEmulation.cmake):
#                 grade_NN_cpu / check_NN_cpu, and the module in attn_emu. A CPU module
#                 (00) is only compiled into attn_emu.
#   SM90A         the module's kernels use what only Hopper's sm_90a target has (wgmma,
#                 setmaxnreg): its two object libraries and its graders are compiled for the
#                 course's architecture list with 90 replaced by 90a ("90-real" by
#                 "90a-real"), e.g. 75;80;86;89;90 -> 75;80;86;89;90a, which nvcc gets as
#                 -gencode=arch=compute_90a,code=[compute_90a,sm_90a]. A list without 90
#                 (a build for sm_80 only) still compiles the module: its kernel code is
#                 guarded by __CUDA_ARCH_FEAT_SM90_ALL and forward() refuses at run time.
#                 The graders get ATTN_MODULE_ARCHITECTURES="75,80,86,89,90a" (the list,
#                 comma-separated), so they can say when a build has no sm_90a code.
#                 attn_add_module(09 hopper SM90A); attn_sm90a_architectures(var) gives the
#                 same list to a benchmark that compiles the module's kernels itself.
#   CUTE          the module uses CuTe (CUTLASS's header-only layout library, found by
#                 cmake/AttnCutlass.cmake): the headers' directory is added to its object
#                 libraries as a SYSTEM include (CuTe's own warnings stay out of -Wall
#                 -Wextra), and so to its graders and everything that links it (for C++
#                 files also libcu++'s directory, which nvcc adds on its own). Without the
#                 headers the module is skipped with one line saying how to get them;
#                 attn_add_module(08 cute CUTE).
# A module folder that holds neither an exercise nor a solution source yet (its interface
# only) is skipped with one line; one that holds just one of the two is an error.
# Each skipped module's line also goes to <build>/attn_skipped_modules.txt ("NN line"), where
# ./course finds why a module's targets do not exist.
# A module's own benchmark or ladder is not built here: bench/CMakeLists.txt has them.

# attn_sm90a_architectures(out): CMAKE_CUDA_ARCHITECTURES with 90 replaced by 90a (keeping a
# -real or -virtual suffix). sm_90a code runs on compute capability 9.0 only, and its PTX is
# not forward compatible, so it is compiled exactly where the list asks for Hopper. The
# special values all, all-major and native are kept as they are (with one line: no sm_90a
# code then; name the architectures, e.g. -DCMAKE_CUDA_ARCHITECTURES=90).
function(attn_sm90a_architectures out)
  set(result "")
  if(CMAKE_CUDA_ARCHITECTURES MATCHES "^(all|all-major|native)$")
    set(result "${CMAKE_CUDA_ARCHITECTURES}")
    message(STATUS "attn: CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} names no "
                   "architecture, so the sm_90a modules get no sm_90a code (their kernels "
                   "refuse to run); give numbers, e.g. -DCMAKE_CUDA_ARCHITECTURES=90")
  else()
    foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      if(arch MATCHES "^90(-real|-virtual)?$")
        list(APPEND result "90a${CMAKE_MATCH_1}")
      else()
        list(APPEND result "${arch}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES result)
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

set(ATTN_SKIPPED_MODULES_FILE "${PROJECT_BINARY_DIR}/attn_skipped_modules.txt")
file(WRITE "${ATTN_SKIPPED_MODULES_FILE}" "")

# _attn_skip_module(number line): the one line that says a module is not built, on the console
# and in attn_skipped_modules.txt.
function(_attn_skip_module number line)
  message(STATUS "attn: ${line}")
  file(APPEND "${ATTN_SKIPPED_MODULES_FILE}" "${number} ${line}\n")
endfunction()

function(attn_add_module number name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "EMULATED;SM90A;CUTE" "" "LIBS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attn_add_module(${number} ${name}): unknown arguments "
                        "${ARG_UNPARSED_ARGUMENTS} (expected EMULATED, SM90A, CUTE, LIBS lib...)")
  endif()
  set(dir ${number}_${name})
  set(src ${PROJECT_SOURCE_DIR})
  file(GLOB _attn_sources ${src}/modules/${dir}/exercise.cu ${src}/modules/${dir}/exercise.cpp
                          ${src}/solutions/${dir}/solution.cu ${src}/solutions/${dir}/solution.cpp)
  if(NOT _attn_sources)
    _attn_skip_module(${number} "module ${dir} has no exercise or solution source yet: not built")
    return()
  endif()
  if(ARG_CUTE AND NOT ATTN_CUTLASS_FOUND)
    string(CONCAT line "module ${dir} skipped: ${ATTN_CUTLASS_MISSING}; ./course setup "
           "installs them (nvidia-cutlass from PyPI), or pass "
           "-DATTN_CUTLASS_INCLUDE_DIR=<dir with cute/tensor.hpp>")
    _attn_skip_module(${number} "${line}")
    return()
  endif()
  if(ARG_EMULATED AND ATTN_EMULATION_SUPPORTED)
    attn_emulate_module(${number} ${name})
  endif()
  if(ARG_SM90A)
    attn_sm90a_architectures(sm90a_archs)
    string(REPLACE ";" "," sm90a_archs_text "${sm90a_archs}")
  endif()
  foreach(impl exercise solution)
    if(impl STREQUAL "exercise")
      set(base ${src}/modules/${dir}/exercise)
    else()
      set(base ${src}/solutions/${dir}/solution)
    endif()
    if(EXISTS ${base}.cu)
      set(impl_source ${base}.cu)
      set(device gpu)
    elseif(EXISTS ${base}.cpp)
      set(impl_source ${base}.cpp)
      set(device cpu)
    else()
      message(FATAL_ERROR "attn_add_module(${number} ${name}): no ${base}.cu or .cpp")
    endif()
    # The going-further exercises of a lesson, when it has a stub file for them: the learner's
    # modules/NN_name/further.cu|.cpp, the answer solutions/NN_name/further.cu|.cpp.
    get_filename_component(impl_dir ${base} DIRECTORY)
    set(further_source)
    foreach(ext cu cpp)
      if(EXISTS ${impl_dir}/further.${ext})
        set(further_source ${impl_dir}/further.${ext})
      endif()
    endforeach()
    set(lib m${number}_${impl})
    add_library(${lib} OBJECT ${impl_source} ${further_source} ${src}/modules/${dir}/register.cpp)
    target_compile_definitions(${lib} PRIVATE ATTN_IMPL=${impl})
    target_link_libraries(${lib} PUBLIC attn_common)
    if(ARG_SM90A)
      set_target_properties(${lib} PROPERTIES CUDA_ARCHITECTURES "${sm90a_archs}")
    endif()
    if(ARG_CUTE)
      target_include_directories(${lib} SYSTEM PUBLIC "${ATTN_CUTLASS_INCLUDE_DIR}")
      foreach(host_dir IN LISTS ATTN_CUTLASS_HOST_INCLUDE_DIRS)
        target_include_directories(${lib} SYSTEM PUBLIC "$<$<COMPILE_LANGUAGE:CXX>:${host_dir}>")
      endforeach()
    endif()
    set_property(GLOBAL APPEND PROPERTY ATTN_MODULE_OBJECT_LIBRARIES ${lib})

    # The grader for this implementation.
    if(impl STREQUAL "exercise")
      set(test_name grade_${number})
    else()
      set(test_name check_${number})
    endif()
    set(test_source ${src}/tests/test_${dir}.cpp)
    if(EXISTS ${test_source})
      add_executable(${test_name} ${test_source})
      target_link_libraries(${test_name} PRIVATE ${lib} attn_test_main_${device} ${ARG_LIBS})
      target_compile_definitions(${test_name} PRIVATE ATTN_IMPL=${impl})
      if(ARG_SM90A)
        set_target_properties(${test_name} PROPERTIES CUDA_ARCHITECTURES "${sm90a_archs}")
        target_compile_definitions(${test_name} PRIVATE
                                   ATTN_MODULE_ARCHITECTURES="${sm90a_archs_text}")
      endif()
      add_test(NAME ${test_name} COMMAND ${test_name})
      set_tests_properties(${test_name} PROPERTIES
        LABELS "${device};${impl};module${number}"
        SKIP_RETURN_CODE 77
        TIMEOUT 900)
    endif()

    # The host grader for this implementation: the checks that need no GPU.
    set(host_test_source ${src}/tests/test_${dir}_host.cpp)
    if(EXISTS ${host_test_source})
      set(host_test_name ${test_name}_host)
      add_executable(${host_test_name} ${host_test_source})
      target_link_libraries(${host_test_name} PRIVATE ${lib} attn_test_main_cpu)
      target_compile_definitions(${host_test_name} PRIVATE ATTN_IMPL=${impl})
      add_test(NAME ${host_test_name} COMMAND ${host_test_name})
      set_tests_properties(${host_test_name} PROPERTIES
        LABELS "cpu;${impl};module${number}"
        TIMEOUT 300)
    endif()
  endforeach()

endfunction()
