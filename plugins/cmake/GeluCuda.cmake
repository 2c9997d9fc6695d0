# CUDA detection for the GELU kernels. gelu_cuda_find(<ok> <reason>) picks an
# nvcc (exported as $CUDACXX) and the architectures; the caller then checks it
# with check_language/enable_language at file scope (enable_language cannot
# run in a function). A missing, broken or mismatched nvcc gives a CPU-only
# build with <reason> in the log, never a failed install (AUTO).
#  * nvcc: CMAKE_CUDA_COMPILER, $CUDACXX, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin,
#    /usr/local/cuda-<GELU_ONNX_CUDA_MAJOR>/bin, /usr/local/cuda/bin.
#  * Architectures (unless CMAKE_CUDA_ARCHITECTURES is given): SASS for
#    sm_75 (T4), 80, 86, 89, 90, 100, 120 that this nvcc knows, plus PTX for
#    the newest of them (JIT on later GPUs).
#  * The CUDA runtime is linked statically: the library runs on any driver
#    that supports that CUDA major (CUDA 13: driver >= 580; CUDA 12: >= 525).
#    GELU_ONNX_CUDA_MAJOR=12 builds with a CUDA 12 toolkit for older drivers.
set(GELU_CUDA_WANTED_ARCHS 75 80 86 89 90 100 120)

function(gelu_cuda_find out_ok out_reason)
  set(${out_ok} OFF PARENT_SCOPE)
  set(hints)
  foreach(v CUDA_HOME CUDA_PATH)
    if(DEFINED ENV{${v}})
      list(APPEND hints "$ENV{${v}}/bin")
    endif()
  endforeach()
  if(GELU_ONNX_CUDA_MAJOR)
    list(APPEND hints "/usr/local/cuda-${GELU_ONNX_CUDA_MAJOR}/bin")
    file(GLOB majors "/usr/local/cuda-${GELU_ONNX_CUDA_MAJOR}.*/bin")
    list(APPEND hints ${majors})
  endif()
  list(APPEND hints /usr/local/cuda/bin)
  set(nvcc "")
  if(CMAKE_CUDA_COMPILER)
    set(nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(DEFINED ENV{CUDACXX})
    set(nvcc "$ENV{CUDACXX}")
  else()
    # A requested major looks in its own install first, then the usual places.
    if(GELU_ONNX_CUDA_MAJOR)
      find_program(GELU_NVCC nvcc HINTS ${hints} NO_DEFAULT_PATH)
    endif()
    find_program(GELU_NVCC nvcc HINTS ${hints})
    set(nvcc "${GELU_NVCC}")
  endif()
  if(NOT nvcc)
    set(${out_reason} "no nvcc found (PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda); set CUDACXX or CUDA_HOME" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND "${nvcc}" --version OUTPUT_VARIABLE ver RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT ver MATCHES "release ([0-9]+)\\.([0-9]+)")
    set(${out_reason} "${nvcc} --version failed" PARENT_SCOPE)
    return()
  endif()
  set(major ${CMAKE_MATCH_1})
  if(GELU_ONNX_CUDA_MAJOR AND NOT major STREQUAL GELU_ONNX_CUDA_MAJOR)
    set(${out_reason} "${nvcc} is CUDA ${major}, not the requested GELU_ONNX_CUDA_MAJOR=${GELU_ONNX_CUDA_MAJOR}" PARENT_SCOPE)
    return()
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    execute_process(COMMAND "${nvcc}" --list-gpu-code OUTPUT_VARIABLE codes RESULT_VARIABLE rc ERROR_QUIET)
    set(archs)
    set(newest "")
    foreach(a ${GELU_CUDA_WANTED_ARCHS})
      if(rc EQUAL 0 AND codes MATCHES "sm_${a}[^0-9]")
        list(APPEND archs ${a}-real)
        set(newest ${a})
      endif()
    endforeach()
    if(NOT archs)
      set(${out_reason} "${nvcc} (CUDA ${major}) lists none of sm_${GELU_CUDA_WANTED_ARCHS}" PARENT_SCOPE)
      return()
    endif()
    list(APPEND archs ${newest}-virtual)
    set(CMAKE_CUDA_ARCHITECTURES "${archs}" CACHE STRING "CUDA architectures (gelu-onnx default: see cmake/GeluCuda.cmake)")
  endif()
  set(ENV{CUDACXX} "${nvcc}")
  set(${out_ok} ON PARENT_SCOPE)
  set(${out_reason} "CUDA ${major}" PARENT_SCOPE)
endfunction()
