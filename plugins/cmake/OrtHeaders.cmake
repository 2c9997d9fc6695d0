# gelu_find_ort_headers(<out-var>): the folder holding onnxruntime_c_api.h.
#  1. ONNXRUNTIME_ROOT (CMake variable or environment): an ONNX Runtime
#     release/install (include/ or include/onnxruntime/) or a source checkout
#     (include/onnxruntime/core/session/).
#  2. Otherwise fetch_ort_headers.sh downloads Debian trixie's
#     libonnxruntime-dev (ORT 1.21 API headers) into the build tree, once.
# Leaves <out-var> empty when neither works.
function(gelu_find_ort_headers out)
  set(${out} "" PARENT_SCOPE)
  if(ONNXRUNTIME_ROOT)
    find_path(_gelu_ort_inc onnxruntime_c_api.h NO_CACHE NO_DEFAULT_PATH
      PATHS ${ONNXRUNTIME_ROOT}
      PATH_SUFFIXES include include/onnxruntime include/onnxruntime/core/session)
    if(_gelu_ort_inc)
      message(STATUS "gelu-onnx: ONNX Runtime headers from ONNXRUNTIME_ROOT: ${_gelu_ort_inc}")
      set(${out} ${_gelu_ort_inc} PARENT_SCOPE)
      return()
    endif()
    message(WARNING "gelu-onnx: ONNXRUNTIME_ROOT=${ONNXRUNTIME_ROOT} holds no onnxruntime_c_api.h")
  endif()
  set(_dest ${CMAKE_BINARY_DIR}/_deps/ort-headers)
  set(_inc ${_dest}/usr/include/onnxruntime)
  if(NOT EXISTS ${_inc}/onnxruntime_c_api.h)
    message(STATUS "gelu-onnx: fetching ONNX Runtime headers (Debian trixie libonnxruntime-dev) into ${_dest}")
    execute_process(
      COMMAND sh ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/fetch_ort_headers.sh ${_dest}
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
    if(NOT _rc EQUAL 0)
      message(WARNING "gelu-onnx: fetching ONNX Runtime headers failed:\n${_log}")
      return()
    endif()
  endif()
  set(${out} ${_inc} PARENT_SCOPE)
endfunction()
