# attn_add_module(NN name [LIBS lib...]): builds module NN_name from
#   modules/NN_name/exercise.cu|.cpp + register.cpp   -> object library mNN_exercise
#   solutions/NN_name/solution.cu|.cpp + register.cpp -> object library mNN_solution
# (with further.cu|.cpp from the same folder when there is one: the lesson's going-further
# stubs, and their answers)
# (the same sources compile with ATTN_IMPL=exercise / solution, so the symbols do not clash),
# and the grader tests/test_NN_name.cpp against each: grade_NN (exercise), check_NN (solution).
# A module whose forward() runs on the CPU is labelled `cpu`, the others `gpu`:
#   attn_add_module(00 reference)   -- CPU: decided by the exercise being a .cpp file
# Optional:
#   LIBS lib...   extra libraries for the module's grader, e.g. cuBLAS for a comparison:
#                 attn_add_module(05 batched_gemm LIBS CUDA::cublas). They are not linked
#                 into the module libraries (so not into `attn`): forward() must not need them.
#   EMULATED      also build the module for the CPU emulation (cmake/AttnEmulation.cmake):
#                 grade_NN_cpu / check_NN_cpu, and the module in attn_emu. A CPU module
#                 (00) is only compiled into attn_emu.
# A module's own benchmark or ladder is not built here: bench/CMakeLists.txt has them.
function(attn_add_module number name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "EMULATED" "" "LIBS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attn_add_module(${number} ${name}): unknown arguments "
                        "${ARG_UNPARSED_ARGUMENTS} (expected EMULATED, LIBS lib...)")
  endif()
  if(ARG_EMULATED AND ATTN_EMULATION_SUPPORTED)
    attn_emulate_module(${number} ${name})
  endif()
  set(dir ${number}_${name})
  set(src ${PROJECT_SOURCE_DIR})
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
      add_test(NAME ${test_name} COMMAND ${test_name})
      set_tests_properties(${test_name} PROPERTIES
        LABELS "${device};${impl};module${number}"
        SKIP_RETURN_CODE 77
        TIMEOUT 900)
    endif()
  endforeach()

endfunction()
