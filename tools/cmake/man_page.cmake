# The man page, made at build time from the binary's own --help (one source of truth):
# `ditbatch --help` for the synopsis, each command's --help in a COMMANDS section, by help2man.
# cmake -DEXE=... -DHELP2MAN=... -DOUT=ditbatch.1 -P man_page.cmake
execute_process(COMMAND ${EXE} --help OUTPUT_VARIABLE usage RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --help failed (${rc})")
endif()
string(REGEX MATCHALL "\n  ([a-z-]+)  " lines "${usage}")
set(include "[COMMANDS]\n")
foreach(line ${lines})
  string(STRIP "${line}" command)
  execute_process(COMMAND ${EXE} ${command} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} ${command} --help failed (${rc})")
  endif()
  # roff: a leading '.' or '\'' would be read as a request; backslashes are escapes
  string(REPLACE "\\" "\\\\" help "${help}")
  string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" help "${help}")
  string(APPEND include ".SS ${command}\n.nf\n${help}\n.fi\n")
endforeach()
file(WRITE ${OUT}.include "${include}")
execute_process(COMMAND ${HELP2MAN} --no-info --no-discard-stderr --include=${OUT}.include
                        "--name=batch text-to-image with the Qwen-Image family, on CPUs, GPUs and clusters"
                        --output=${OUT} ${EXE}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed (${rc})")
endif()
