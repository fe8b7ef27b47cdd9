# Writes OUT, the C++ definition of ditbatch::build_commit(): the commit of SOURCE_DIR, with
# "+dirty" when tracked files differ from it. Run at every build (not at configure time, which
# left a rebuilt binary naming the commit it was configured at), and the file is rewritten only
# when its text changes, so an unchanged tree recompiles nothing.
#   cmake -DSOURCE_DIR=... -DOUT=.../build_info.cpp -P build_info.cmake
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")  # a source tree without git (an export, a tarball)
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "+dirty")
  endif()
endif()
set(text "// Written by tools/cmake/build_info.cmake at build time.\n#include \"core/build_info.h\"\n\nconst char* ditbatch::build_commit() { return \"${commit}\"; }\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
