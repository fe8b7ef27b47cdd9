# Which optional cuDNN paths a build against the cuDNN headers in a folder compiles, from
# their cudnn_version.h. The thresholds are those of kernels/cudnn_graph.h (the binary reports
# its own view, `ditbatch --version`, and a unit test holds the two to each other):
#   SDPA attention          CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR and its attributes: 9.13.0
#   SDPA length padding     its SEQ_LEN_Q / SEQ_LEN_KV attributes (lengths padded to buckets): 9.15.0
#   deviceless heuristics   CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR (the CI graph test): 9.8.0
#   convolution + bias      nothing newer than 9.0.0
# Used by CMakeLists.txt, and on its own by tools/ci/cuda_portability.sh to say what a
# configure against other headers would compile:
#   cmake -DCUDNN_INCLUDE_DIR=.../include -P tools/cmake/cudnn_features.cmake
#
# ditbatch_cudnn_features(INCLUDE_DIR) sets DITBATCH_CUDNN_VERSION ("9.1.0"),
# DITBATCH_CUDNN_SDPA, DITBATCH_CUDNN_SDPA_PADDING, DITBATCH_CUDNN_CONV, DITBATCH_CUDNN_DEVICELESS (ON/OFF) and
# DITBATCH_CUDNN_SUMMARY (one line) in the caller's scope; a cuDNN older than 9.0 is an error.
function(ditbatch_cudnn_features include_dir)
  set(header "${include_dir}/cudnn_version.h")
  if(NOT EXISTS "${header}")
    message(FATAL_ERROR "cuDNN: ${header} not found (set CUDNN_INCLUDE_DIR to the folder with cudnn.h)")
  endif()
  file(STRINGS "${header}" defines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} +([0-9]+)" found "${defines}")
    if(NOT found)
      message(FATAL_ERROR "cuDNN: ${header} has no CUDNN_${part}")
    endif()
    set(${part} ${CMAKE_MATCH_1})
  endforeach()
  set(version "${MAJOR}.${MINOR}.${PATCHLEVEL}")
  if(MAJOR LESS 9)
    message(FATAL_ERROR "cuDNN ${version} (${include_dir}): ditbatch needs cuDNN 9.0 or newer")
  endif()
  math(EXPR number "${MAJOR} * 10000 + ${MINOR} * 100 + ${PATCHLEVEL}")  # CUDNN_VERSION of cuDNN 9
  set(sdpa OFF)
  set(sdpa_padding OFF)
  set(deviceless OFF)
  if(number GREATER_EQUAL 91300)
    set(sdpa ON)
  endif()
  if(number GREATER_EQUAL 91500)
    set(sdpa_padding ON)
  endif()
  if(number GREATER_EQUAL 90800)
    set(deviceless ON)
  endif()
  if(sdpa_padding)
    set(sdpa_text "SDPA attention yes (used from cuDNN 9.13.1 at run time, lengths padded to buckets from 9.15.0)")
  elseif(sdpa)
    set(sdpa_text "SDPA attention yes (used from cuDNN 9.13.1 at run time; headers older than 9.15.0: a plan per length)")
  else()
    set(sdpa_text "SDPA attention no (headers older than 9.13.0: attention takes the GEMM path)")
  endif()
  if(deviceless)
    set(deviceless_text "deviceless graph tests yes")
  else()
    set(deviceless_text "deviceless graph tests no (need 9.8.0)")
  endif()
  set(DITBATCH_CUDNN_VERSION "${version}" PARENT_SCOPE)
  set(DITBATCH_CUDNN_SDPA ${sdpa} PARENT_SCOPE)
  set(DITBATCH_CUDNN_SDPA_PADDING ${sdpa_padding} PARENT_SCOPE)
  set(DITBATCH_CUDNN_CONV ON PARENT_SCOPE)
  set(DITBATCH_CUDNN_DEVICELESS ${deviceless} PARENT_SCOPE)
  set(DITBATCH_CUDNN_SUMMARY "cuDNN ${version} headers: ${sdpa_text}, convolution yes, ${deviceless_text}"
      PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  ditbatch_cudnn_features("${CUDNN_INCLUDE_DIR}")
  message("${DITBATCH_CUDNN_SUMMARY}")
endif()
