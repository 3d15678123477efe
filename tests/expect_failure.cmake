# Runs COMMAND (a ;-list) and passes only if it exits non-zero, its output matches EXPECT, and the path
# NOT_WRITTEN (if given) does not exist afterwards: an error is reported and nothing is half-written.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, got exit 0:\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}':\n${out}${err}")
endif()
if(NOT_WRITTEN AND EXISTS "${NOT_WRITTEN}")
  message(FATAL_ERROR "${NOT_WRITTEN} was written")
endif()
message(STATUS "failed as expected (exit ${rc}): ${err}")
