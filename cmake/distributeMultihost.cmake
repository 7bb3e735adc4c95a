# distribute_multihost_test(NAME HOSTS k SLOTS s [RATE gbit] [GLOO] TIMEOUT seconds COMMAND program args...)
# adds a ctest test that runs `mpirun program args...` (with GLOO: s plain processes per host,
# joined over Gloo; labelled gloo too) on k hosts of s slots each, made by
# tests/multihost/hosts.sh on this machine, with links of RATE Gbit/s (default 10). Labelled
# multihost and end_to_end (the sanitizer presets leave it out: the code it runs is the multi-worker
# tests' on one host); it skips (exit code 77, with the reason) where the hosts cannot be made, and the
# harness ends the job 10 s before ctest's TIMEOUT so that it removes the hosts itself.
function(distribute_multihost_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "GLOO" "HOSTS;SLOTS;RATE;TIMEOUT" "COMMAND")
  if(NOT arg_RATE)
    set(arg_RATE 10)
  endif()
  math(EXPR job_limit "${arg_TIMEOUT} - 10")
  set(launch "")
  set(labels multihost end_to_end)
  if(arg_GLOO)
    set(launch --gloo)
    list(APPEND labels gloo)
  endif()
  add_test(NAME ${name}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/multihost/hosts.sh --hosts ${arg_HOSTS} --slots ${arg_SLOTS}
                   --rate ${arg_RATE} --timeout ${job_limit} ${launch} -- ${arg_COMMAND})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS "${labels}" SKIP_RETURN_CODE 77
                       ENVIRONMENT "${DISTRIBUTE_MPI_TEST_ENV}")
endfunction()
