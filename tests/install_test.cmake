# The install test (cmake -P): installs the build tree BUILD_DIR into a scratch prefix under
# WORK_DIR, checks the installed layout, then configures, builds and runs the consumer project
# SOURCE_DIR against that prefix only. Fails with FATAL_ERROR at the first step that does not work.
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<tests/install> -DWORK_DIR=<scratch> -P install_test.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install test: pass -D${var}=<path>")
  endif()
endforeach()

# The consumer is built with the library's compiler, generator and build type, and with its
# sanitizer flags: a sanitized static library only links into a sanitized program.
file(STRINGS "${BUILD_DIR}/CMakeCache.txt" cache_lines
     REGEX "^(CMAKE_CXX_COMPILER|CMAKE_GENERATOR|CMAKE_MAKE_PROGRAM|CMAKE_BUILD_TYPE|DISTRIBUTE_SANITIZE|DISTRIBUTE_WITH_MPI|DISTRIBUTE_WITH_GLOO|DISTRIBUTE_WITH_TORCH|MPIEXEC_EXECUTABLE):[A-Z]+=")
foreach(line IN LISTS cache_lines)
  if(line MATCHES "^([A-Z_]+):[A-Z]+=(.*)$")
    set(build_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
if(NOT build_CMAKE_GENERATOR)
  message(FATAL_ERROR "install test: ${BUILD_DIR} is not a configured build tree (no CMakeCache.txt)")
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command_line)
    message(FATAL_ERROR "install test: ${what} failed (${rc}):\n${command_line}\n${out}")
  endif()
  message(STATUS "install test: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")

foreach(header distribute/distribute.h distribute/config.h distribute/version.h)
  if(NOT EXISTS "${prefix}/include/${header}")
    message(FATAL_ERROR "install test: ${prefix}/include/${header} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE package_configs "${prefix}/*/distributeConfig.cmake")
if(NOT package_configs)
  message(FATAL_ERROR "install test: no distributeConfig.cmake under ${prefix}")
endif()

set(configure_args
  -S "${SOURCE_DIR}" -B "${consumer_build}" -G "${build_CMAKE_GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${build_CMAKE_CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${build_CMAKE_BUILD_TYPE}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(build_CMAKE_MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${build_CMAKE_MAKE_PROGRAM}")
endif()
if(build_DISTRIBUTE_SANITIZE)
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${build_DISTRIBUTE_SANITIZE}"
                             "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${build_DISTRIBUTE_SANITIZE}")
endif()
# The mpi component, where the library was built with it: find_package(... COMPONENTS mpi).
if(build_DISTRIBUTE_WITH_MPI)
  list(APPEND configure_args -DWITH_MPI=ON)
endif()
# The gloo and torch components likewise.
if(build_DISTRIBUTE_WITH_GLOO)
  list(APPEND configure_args -DWITH_GLOO=ON)
endif()
if(build_DISTRIBUTE_WITH_TORCH)
  list(APPEND configure_args -DWITH_TORCH=ON)
endif()
run_step("configuring the consumer" "${CMAKE_COMMAND}" ${configure_args})

# find_package must have found the scratch install, not some other copy on the machine.
file(STRINGS "${consumer_build}/CMakeCache.txt" found_dir REGEX "^distribute_DIR:")
string(REGEX REPLACE "^distribute_DIR:[A-Z]+=" "" found_dir "${found_dir}")
cmake_path(IS_PREFIX prefix "${found_dir}" NORMALIZE found_in_prefix)
if(NOT found_in_prefix)
  message(FATAL_ERROR "install test: find_package(distribute) used ${found_dir}, not the install in ${prefix}")
endif()

run_step("building the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run_step("running the consumer" "${consumer_build}/consumer")
message(STATUS "${step_output}")
if(build_DISTRIBUTE_WITH_TORCH)
  run_step("running the torch consumer" "${consumer_build}/consumer_torch")
  message(STATUS "${step_output}")
endif()
if(build_DISTRIBUTE_WITH_GLOO)
  # Two plain processes, started by a shell loop (tests/launch_workers.sh), meeting at a file store.
  run_step("running the gloo consumer on 2 workers" "${SOURCE_DIR}/../launch_workers.sh" -n 2 --
           "${consumer_build}/consumer_gloo")
  message(STATUS "${step_output}")
endif()
if(build_DISTRIBUTE_WITH_MPI)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  # As for every MPI test (see DISTRIBUTE_MPI_TEST_ENV in the top CMakeLists.txt).
  set(ENV{TSAN_OPTIONS} "halt_on_error=1 second_deadlock_stack=1 suppressions=${SOURCE_DIR}/../sanitizers/openmpi.tsan.supp")
  set(ENV{ASAN_OPTIONS} "detect_leaks=0:protect_shadow_gap=0")
  run_step("running the mpi consumer on 2 workers" "${build_MPIEXEC_EXECUTABLE}" --oversubscribe --bind-to none -np 2
           "${consumer_build}/consumer_mpi")
  message(STATUS "${step_output}")
endif()
