# Runs a job that must die (cmake -P): passes when COMMAND exits non-zero within LIMIT seconds and
# its output holds EXPECT; fails when it succeeds, takes longer (it would have hung) or says
# something else.
#   cmake -DCOMMAND="mpirun;-np;2;prog;exit" -DLIMIT=30 -DEXPECT="worker 1 leaves" -P expect_job_dies.cmake
cmake_minimum_required(VERSION 3.25)

string(TIMESTAMP start "%s" UTC)
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
                TIMEOUT ${LIMIT})
string(TIMESTAMP end "%s" UTC)
math(EXPR elapsed "${end} - ${start}")
message(STATUS "job ended after ${elapsed} s with '${rc}':\n${out}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0; it should have died")
endif()
if(NOT rc MATCHES "^[0-9]+$" OR elapsed GREATER_EQUAL LIMIT)
  message(FATAL_ERROR "the job did not end within ${LIMIT} s ('${rc}'): it hangs")
endif()
if(DEFINED EXPECT AND NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the job's output does not say '${EXPECT}'")
endif()
string(FIND "${out}" "worker 0 was not stopped" survived)
if(NOT survived EQUAL -1)
  message(FATAL_ERROR "worker 0 went on past its peer's death")
endif()
