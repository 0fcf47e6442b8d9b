# The CUTLASS/CuTe headers (header-only, never copied into the repository) for the modules
# that use CuTe: attn_add_module(NN name CUTE). Sets
#   ATTN_CUTLASS_INCLUDE_DIR   (cache) a directory holding cute/tensor.hpp and cutlass/version.h
#   ATTN_CUTLASS_FOUND         TRUE when that directory is usable (CUTLASS 3.0 or newer)
#   ATTN_CUTLASS_MISSING       otherwise, why not (attn_add_module names it when it skips a module)
#   ATTN_CUTLASS_HOST_INCLUDE_DIRS  what a host compiler needs besides (libcu++, see below)
# Searched in this order:
#   1. -DATTN_CUTLASS_INCLUDE_DIR=<dir>  taken as given (a directory without the headers skips
#      the CuTe modules; nothing else is searched);
#   2. the environment's CUTLASS_DIR or CUTLASS_PATH: a CUTLASS checkout, its include/;
#   3. .deps/nvidia-cutlass-<version>/include, which ./course setup unpacks from PyPI's
#      nvidia-cutlass wheel;
#   4. the cutlass_library Python package (pip install nvidia-cutlass): its source/include.
# A value found by the search is cached, and searched again at the next configure (so a
# deleted .deps/ or a newly installed wheel is noticed); a value given with -D is kept.

# The release ./course setup installs (docs/setup.md).
set(ATTN_CUTLASS_VERSION 4.2.0.0)
set(ATTN_CUTLASS_DEPS_DIR "${PROJECT_SOURCE_DIR}/.deps/nvidia-cutlass-${ATTN_CUTLASS_VERSION}/include")

set(ATTN_CUTLASS_INCLUDE_DIR "" CACHE PATH
    "CUTLASS/CuTe headers: a directory with cute/tensor.hpp (./course setup installs them)")

# _attn_cutlass_version(dir out): "MAJOR.MINOR.PATCH" from dir/cutlass/version.h, or "".
function(_attn_cutlass_version dir out)
  set(version "")
  if(EXISTS "${dir}/cutlass/version.h")
    file(STRINGS "${dir}/cutlass/version.h" defines
         REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) +[0-9]+")
    foreach(part MAJOR MINOR PATCH)
      set(value_${part} 0)
      foreach(line IN LISTS defines)
        if(line MATCHES "^#define CUTLASS_${part} +([0-9]+)")
          set(value_${part} ${CMAKE_MATCH_1})
        endif()
      endforeach()
    endforeach()
    set(version "${value_MAJOR}.${value_MINOR}.${value_PATCH}")
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

if(ATTN_CUTLASS_INCLUDE_DIR AND NOT ATTN_CUTLASS_INCLUDE_DIR MATCHES "-NOTFOUND$"
   AND NOT ATTN_CUTLASS_INCLUDE_DIR STREQUAL "${_ATTN_CUTLASS_SEARCHED}")
  set(_attn_cutlass_dir "${ATTN_CUTLASS_INCLUDE_DIR}")
  set(_attn_cutlass_from "-DATTN_CUTLASS_INCLUDE_DIR")
else()
  set(_attn_cutlass_dir "")
  set(_attn_cutlass_candidates "")
  foreach(var CUTLASS_DIR CUTLASS_PATH)
    if(DEFINED ENV{${var}} AND NOT "$ENV{${var}}" STREQUAL "")
      list(APPEND _attn_cutlass_candidates "$ENV{${var}}/include|environment ${var}"
                                           "$ENV{${var}}|environment ${var}")
    endif()
  endforeach()
  list(APPEND _attn_cutlass_candidates "${ATTN_CUTLASS_DEPS_DIR}|./course setup")
  foreach(candidate IN LISTS _attn_cutlass_candidates)
    string(REPLACE "|" ";" candidate "${candidate}")
    list(GET candidate 0 dir)
    list(GET candidate 1 from)
    if(EXISTS "${dir}/cute/tensor.hpp")
      set(_attn_cutlass_dir "${dir}")
      set(_attn_cutlass_from "${from}")
      break()
    endif()
  endforeach()
  # The Python package: find_spec locates it without importing it (importing would need its
  # own dependencies, such as cuda-python, which the headers do not).
  if(NOT _attn_cutlass_dir)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_attn_cutlass_pythons ${ATTN_PYTHON} ${Python3_EXECUTABLE})
    list(REMOVE_DUPLICATES _attn_cutlass_pythons)
    foreach(python IN LISTS _attn_cutlass_pythons)
      execute_process(
        COMMAND "${python}" -c "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(os.path.dirname(s.origin), 'source', 'include') if s and s.origin else '')"
        OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND dir AND EXISTS "${dir}/cute/tensor.hpp")
        set(_attn_cutlass_dir "${dir}")
        set(_attn_cutlass_from "the cutlass_library Python package of ${python}")
        break()
      endif()
    endforeach()
  endif()
  if(_attn_cutlass_dir)
    get_filename_component(_attn_cutlass_dir "${_attn_cutlass_dir}" ABSOLUTE)
    set(ATTN_CUTLASS_INCLUDE_DIR "${_attn_cutlass_dir}" CACHE PATH
        "CUTLASS/CuTe headers: a directory with cute/tensor.hpp (./course setup installs them)"
        FORCE)
  else()
    set(ATTN_CUTLASS_INCLUDE_DIR "ATTN_CUTLASS_INCLUDE_DIR-NOTFOUND" CACHE PATH
        "CUTLASS/CuTe headers: a directory with cute/tensor.hpp (./course setup installs them)"
        FORCE)
  endif()
  # Remembered so that the next configure tells a searched value from one given with -D.
  set(_ATTN_CUTLASS_SEARCHED "${ATTN_CUTLASS_INCLUDE_DIR}" CACHE INTERNAL "")
endif()

set(ATTN_CUTLASS_FOUND FALSE)
set(ATTN_CUTLASS_MISSING "CUTLASS/CuTe headers not found")
if(_attn_cutlass_dir)
  _attn_cutlass_version("${_attn_cutlass_dir}" _attn_cutlass_found_version)
  if(NOT EXISTS "${_attn_cutlass_dir}/cute/tensor.hpp")
    set(ATTN_CUTLASS_MISSING "CUTLASS/CuTe headers not found in ${_attn_cutlass_from}=${_attn_cutlass_dir} (no cute/tensor.hpp)")
  elseif(NOT _attn_cutlass_found_version)
    set(ATTN_CUTLASS_MISSING "CUTLASS/CuTe headers in ${_attn_cutlass_dir} incomplete (cute/ but no cutlass/version.h)")
  elseif(_attn_cutlass_found_version VERSION_LESS 3)
    set(ATTN_CUTLASS_MISSING "CUTLASS/CuTe headers in ${_attn_cutlass_dir} are version ${_attn_cutlass_found_version}, CuTe needs 3.0 or newer")
  else()
    set(ATTN_CUTLASS_FOUND TRUE)
    set(ATTN_CUTLASS_MISSING "")
    message(STATUS "attn: CUTLASS/CuTe ${_attn_cutlass_found_version} headers in "
                   "${_attn_cutlass_dir} (from ${_attn_cutlass_from})")
  endif()
endif()

# CUTLASS includes libcu++ (<cuda/std/...>). nvcc finds it on its own; a host compiler, which
# compiles the host graders (C++ files that include CuTe to check layouts), needs its directory
# too: the toolkit's include/ up to CUDA 12, include/cccl/ from CUDA 13 on.
set(ATTN_CUTLASS_HOST_INCLUDE_DIRS "")
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  if(NOT EXISTS "${dir}/cuda/std/utility" AND EXISTS "${dir}/cccl/cuda/std/utility")
    list(APPEND ATTN_CUTLASS_HOST_INCLUDE_DIRS "${dir}/cccl")
  endif()
endforeach()
