# distribute_gtest(<target> [ONE_PROCESS] TIMEOUT <seconds> LABELS <labels>): registers a GoogleTest
# executable with ctest. Each of its tests becomes a ctest test of its own (gtest_discover_tests),
# with TIMEOUT each, so that ctest names every test and a hang fails only its own. ONE_PROCESS
# makes the executable one ctest test that runs all of its tests in one process, with TIMEOUT for
# the whole: for executables whose start costs more than their tests (one that loads LibTorch
# starts in 0.6 s, 2 s under ThreadSanitizer, and 40 such starts were most of the torch tests' time).
include(GoogleTest)

function(distribute_gtest target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "ONE_PROCESS" "TIMEOUT" "LABELS")
  if(arg_ONE_PROCESS)
    add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
    set_tests_properties(${target} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS "${arg_LABELS}")
  else()
    gtest_discover_tests(${target} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS "${arg_LABELS}" DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
