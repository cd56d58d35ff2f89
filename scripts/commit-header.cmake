# Writes OUT (a header defining TFPROV_COMMIT) from `git rev-parse HEAD` of SRC,
# "-dirty" appended when tracked files differ from HEAD, "unknown" outside git.
# Run at every build (tfprov_commit target); OUT is rewritten only when the
# text changes, so an unchanged commit recompiles nothing.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit unknown)
else()
  execute_process(COMMAND git -C "${SRC}" diff --quiet HEAD --
    RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
  if(dirty EQUAL 1)
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#define TFPROV_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
