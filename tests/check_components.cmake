# Checks what a program sees of a component this build of distribute lacks, by compiling probes
# against a copy of the generated config.h that says the MPI, Gloo and torch components were not
# built (then again with Gloo alone):
#  - the umbrella header compiles alone;
#  - a program that names MultiWorkerMirroredStrategy (or its options) through it fails to compile
#    with the message that says how to get a backend;
#  - including a component's own header fails the same way;
#  - with Gloo alone, the strategy compiles and MpiClusterResolver says it needs the MPI component.
#
#   cmake -DCONFIG_H=<build>/generated/distribute/config.h -DCXX=c++
#         -DINCLUDE_DIRS="<dir>|<dir>" -P check_components.cmake
cmake_minimum_required(VERSION 3.25)

set(work ${CMAKE_CURRENT_BINARY_DIR}/components_probe)
file(REMOVE_RECURSE ${work})
file(READ ${CONFIG_H} config)
string(REGEX REPLACE "#define DISTRIBUTE_HAS_MPI [01]" "#define DISTRIBUTE_HAS_MPI 0" config "${config}")
string(REGEX REPLACE "#define DISTRIBUTE_HAS_TORCH [01]" "#define DISTRIBUTE_HAS_TORCH 0" config "${config}")
string(REGEX REPLACE "#define DISTRIBUTE_HAS_GLOO [01]" "#define DISTRIBUTE_HAS_GLOO 0" config "${config}")
file(WRITE ${work}/generated/distribute/config.h "${config}")
string(REPLACE "#define DISTRIBUTE_HAS_GLOO 0" "#define DISTRIBUTE_HAS_GLOO 1" gloo_config "${config}")
file(WRITE ${work}/gloo_only/distribute/config.h "${gloo_config}")

# The copy first, so that it shadows the build's own config.h.
set(include_flags -I${work}/generated)
string(REPLACE "|" ";" include_dirs "${INCLUDE_DIRS}")
foreach(dir IN LISTS include_dirs)
  list(APPEND include_flags -I${dir})
endforeach()

set(failures "")
# probe(name source expect_ok message_regex [config directory])
function(probe name source expect_ok message)
  file(WRITE ${work}/${name}.cc "${source}")
  set(flags ${include_flags})
  if(ARGC GREATER 4)
    list(PREPEND flags -I${ARGV4})
  endif()
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only ${flags} ${work}/${name}.cc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(expect_ok AND NOT rc EQUAL 0)
    list(APPEND failures "${name}: does not compile without the components:\n${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    list(APPEND failures "${name}: compiles without the components, but should fail saying so")
  elseif(NOT expect_ok AND NOT err MATCHES "${message}")
    list(APPEND failures "${name}: fails without saying '${message}':\n${err}")
  endif()
  set(failures "${failures}" PARENT_SCOPE)
endfunction()

set(says "this build of distribute has no multi-worker backend.*-DDISTRIBUTE_WITH_MPI=ON or -DDISTRIBUTE_WITH_GLOO=ON")
set(says_mpi "this build of distribute has no MPI component.*-DDISTRIBUTE_WITH_MPI=ON")
probe(umbrella_alone "#include <distribute/distribute.h>\nint main() { distribute::MirroredStrategy s({\"CPU:0\"}); }\n" TRUE "")
probe(names_options "#include <distribute/distribute.h>\nint main() { distribute::MultiWorkerMirroredStrategyOptions options; }\n"
      FALSE "${says}")
probe(names_strategy
      "#include <memory>\n#include <distribute/distribute.h>\nint main() { auto s = std::make_unique<distribute::MultiWorkerMirroredStrategy>(); }\n"
      FALSE "${says}")
probe(includes_strategy "#include <distribute/strategy/multi_worker_mirrored_strategy.h>\nint main() {}\n" FALSE
      "${says}")
probe(includes_component "#include <distribute/mpi/multi_worker_mirrored_strategy.h>\nint main() {}\n" FALSE
      "${says_mpi}")
probe(gloo_only_strategy
      "#include <distribute/distribute.h>\nint main() { distribute::MultiWorkerMirroredStrategyOptions o; o.backend = distribute::CollectiveBackend::kGloo; }\n"
      TRUE "" ${work}/gloo_only)
probe(gloo_only_mpi_resolver
      "#include <memory>\n#include <distribute/distribute.h>\nint main() { auto r = std::make_shared<distribute::MpiClusterResolver>(); }\n"
      FALSE "${says_mpi}" ${work}/gloo_only)

probe(includes_torch "#include <distribute/torch/torch.h>\nint main() {}\n" FALSE
      "this build of distribute has no torch component.*-DDISTRIBUTE_WITH_TORCH=ON")

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "check_components:\n  ${text}")
endif()
message(STATUS "check_components: without the MPI, Gloo and torch components the umbrella compiles and each use of a component says why it fails")
