# What the command-line tests of the Fashion-MNIST programs share (train_cli_test.cmake here and in
# ../torch_fashion_mnist, run by cmake -P with PROGRAM set to the program under test).

# Runs the command line of the function's arguments; sets rc (its exit status) and out (stdout and
# stderr together) in the caller, and shows both.
function(run_command)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE run_rc OUTPUT_VARIABLE run_out ERROR_VARIABLE run_out)
  message(STATUS "${ARGN}: exit ${run_rc}\n${run_out}")
  set(rc "${run_rc}" PARENT_SCOPE)
  set(out "${run_out}" PARENT_SCOPE)
endfunction()

# Runs PROGRAM with the macro's arguments, as run_command does.
macro(run)
  run_command(${PROGRAM} ${ARGN})
endmacro()

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

# Runs PROGRAM --help, which must list the flags defined in `main_file` (its path in the project,
# e.g. examples/fashion_mnist/main.cc; a compiler launcher may have put a relative path before it,
# as ccache does with CCACHE_BASEDIR) and each flag named after it.
function(expect_help main_file)
  # Abseil of 2022 exits 1 after any help, so the exit status says nothing here.
  run(--help)
  expect_in("${out}" "${main_file}:")
  foreach(flag IN LISTS ARGN)
    expect_in("${out}" "--${flag} (")
  endforeach()
  expect_not_in("${out}" "No flags matched")
endfunction()

# For a case that trains: ends the script, saying "skipped: Fashion-MNIST is not installed", without
# Debian's dataset-fashion-mnist in data_dir; otherwise empties WORK_DIR.
macro(prepare_training)
  if(NOT EXISTS ${data_dir}/train-images-idx3-ubyte.gz)
    message("skipped: Fashion-MNIST is not installed in ${data_dir} (apt-get install dataset-fashion-mnist)")
    return()
  endif()
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
endmacro()
