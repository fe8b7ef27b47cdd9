# Writes OUT, the C++ definition of ditbatch::build_commit(): the commit of SOURCE_DIR, with
# "+dirty" when tracked files differ from it. A source tree that is not a git checkout of its own
# (a `git archive` tarball, as EasyBuild builds it) takes the commit `git archive` wrote into
# tools/cmake/archive_commit.txt (export-subst, .gitattributes), else "unknown". Run at every build (not at configure time, which
# left a rebuilt binary naming the commit it was configured at), and the file is rewritten only
# when its text changes, so an unchanged tree recompiles nothing.
#   cmake -DSOURCE_DIR=... -DOUT=.../build_info.cpp -P build_info.cmake
# The top of the work tree must be SOURCE_DIR: a tarball unpacked inside some other checkout
# must not take that checkout's commit.
execute_process(COMMAND git rev-parse --show-toplevel WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
set(commit "")
if(status EQUAL 0)
  file(REAL_PATH "${top}" top)
  file(REAL_PATH "${SOURCE_DIR}" source)
  if(top STREQUAL source)
    execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                    OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
set(archived "")
if(commit STREQUAL "" AND EXISTS "${SOURCE_DIR}/tools/cmake/archive_commit.txt")
  file(READ "${SOURCE_DIR}/tools/cmake/archive_commit.txt" archived)
endif()
if(commit STREQUAL "")
  if(archived MATCHES "^([0-9a-f]+)")  # substituted by git archive; else still "$Format:...$"
    string(SUBSTRING "${CMAKE_MATCH_1}" 0 12 commit)
  else()
    set(commit "unknown")  # a copy of the files, neither a checkout nor an archive
  endif()
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
