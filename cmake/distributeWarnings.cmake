# Warnings for distribute's own code (library, tests, examples, benchmarks). The library links it
# privately and only in the build tree, so it is not exported: consumers keep their own flags.
add_library(distribute_warnings INTERFACE)
# C++ only: nvcc compiles the CUDA kernels with its own flags.
set(distribute_warning_flags
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wno-missing-field-initializers)
# Clang checks the ABSL_GUARDED_BY annotations (the thread-safety preset makes that an error).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND distribute_warning_flags -Wthread-safety)
endif()
target_compile_options(distribute_warnings INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:${distribute_warning_flags}>")
