# distribute_gtest(<target> TIMEOUT <seconds> LABELS <labels>): registers a GoogleTest executable
# with ctest, each of its tests a ctest test of its own (gtest_discover_tests), with TIMEOUT each,
# so that ctest names every test and a hang or a sanitizer's report fails only its own. (One
# process for all of the LibTorch tests saved 55 s of ThreadSanitizer time, but there a test
# inherited what LibTorch's threads had left of the tests before it, and TSan reported a race in
# LibTorch's autograd that the test alone never shows.)
include(GoogleTest)

function(distribute_gtest target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT" "LABELS")
  gtest_discover_tests(${target} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS "${arg_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
