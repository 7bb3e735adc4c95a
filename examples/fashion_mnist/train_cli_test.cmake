# train_fashion_mnist as a user runs it (cmake -P), one CASE per ctest test:
#   help      --help lists the program's flags
#   helpfull  --helpfull names main.cc by its path in the project, never the source tree's
#   cmake -DPROGRAM=.../train_fashion_mnist -DSOURCE_DIR=<project root> -DCASE=help -P train_cli_test.cmake
# The output is read through a pipe, as in a log.
cmake_minimum_required(VERSION 3.25)

# Runs PROGRAM with the function's arguments; sets rc and out (stdout and stderr together).
function(run)
  execute_process(COMMAND ${PROGRAM} ${ARGN} RESULT_VARIABLE run_rc OUTPUT_VARIABLE run_out ERROR_VARIABLE run_out)
  message(STATUS "train_fashion_mnist ${ARGN}: exit ${run_rc}\n${run_out}")
  set(rc "${run_rc}" PARENT_SCOPE)
  set(out "${run_out}" PARENT_SCOPE)
endfunction()

function(expect_in text what)
  string(FIND "${text}" "${what}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output does not hold '${what}'")
  endif()
endfunction()

function(expect_not_in text what)
  string(FIND "${text}" "${what}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the output holds '${what}'")
  endif()
endfunction()

if(CASE STREQUAL "help")
  # Abseil of 2022 exits 1 after any help, so the exit status says nothing here.
  run(--help)
  expect_in("${out}" "Flags from examples/fashion_mnist/main.cc:")
  foreach(flag epochs replicas batch_size checkpoint resume)
    expect_in("${out}" "--${flag} (")
  endforeach()
  expect_not_in("${out}" "No flags matched")
elseif(CASE STREQUAL "helpfull")
  run(--helpfull)
  expect_in("${out}" "Flags from examples/fashion_mnist/main.cc:")
  # Abseil drops a leading slash, so the source tree would show without its first one.
  string(REGEX REPLACE "^/+" "" tree "${SOURCE_DIR}")
  expect_not_in("${out}" "${tree}")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
