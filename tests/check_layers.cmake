# Checks that dependencies between the library's layers point one way, in two ways:
#  - includes: every #include in include/distribute/ and src/ names a header of the file's own
#    layer or of a layer below it;
#  - links: every symbol an object file of the library uses and another object file defines
#    (strongly: inline functions and templates do not count) is defined in the same layer or a
#    lower one, so no declaration in a lower layer is implemented by a higher one.
# And that the umbrella header, compiled as a user's program would, with only the public include
# directories, pulls in no internals of storage, waiting or synchronisation.
#
#   cmake -DSOURCE_DIR=<repo> -DOBJECT_DIR=<build>/CMakeFiles/distribute.dir -DNM=nm
#         -DCXX=c++ -DINCLUDE_DIRS="<dir>|<dir>" -P check_layers.cmake
cmake_minimum_required(VERSION 3.25)

# The layers bottom up and, for each, the layers it may use (itself included). `cluster` is every
# concern that crosses processes (the coordinator, its channels, the hierarchical communicator);
# `cluster_mpi` (src/cluster/mpi/) is its MPI backend, which only the component that chooses it
# (`mpi`, the multi-worker strategy) reaches, and `cluster_gloo` (src/cluster/gloo/) its Gloo
# backend: the layers above the cluster go through its coordinator, never to a backend.
set(allowed_base base)
set(allowed_device base device)
set(allowed_nest base device nest)
set(allowed_values base device nest values)
set(allowed_collective base device collective)
set(allowed_cluster base device collective cluster)
set(allowed_cluster_mpi base device collective cluster cluster_mpi)
set(allowed_cluster_gloo base device collective cluster cluster_gloo)
set(allowed_replica base device nest values collective cluster replica)
set(allowed_data base device nest data)
set(allowed_input base device nest values collective cluster replica data input)
set(allowed_strategy base device nest values collective cluster replica data input strategy)
set(allowed_variables base device nest values collective cluster replica strategy variables)
set(allowed_nn base device nest values collective replica strategy nn)
set(allowed_optimizers base device nest values collective replica strategy variables optimizers)
set(allowed_checkpoint base device nest values collective cluster replica strategy variables checkpoint)
# Elastic training (ElasticState, run_elastic): the state a checkpoint names, kept across the
# changes of a multi-worker strategy's workers.
set(allowed_elastic base device nest values collective cluster replica data input strategy variables checkpoint elastic)
# The multi-worker component (its own library): the strategy, which builds the cluster over the
# MPI or Gloo backend, and its elastic training.
set(allowed_multi_worker base device nest values collective cluster replica data input strategy variables checkpoint elastic multi_worker)
set(allowed_mpi base device nest values collective cluster cluster_mpi replica data input strategy multi_worker mpi)
set(allowed_gloo base device collective cluster cluster_gloo strategy multi_worker gloo)
# The torch component (its own library): LibTorch tensors and modules under the strategies.
set(allowed_torch base device nest values collective replica strategy variables optimizers checkpoint torch)
set(allowed_umbrella base device nest values collective cluster replica data input strategy variables nn optimizers checkpoint mpi umbrella)

# The layer of a path relative to the source tree.
function(layer_of path out)
  if(path STREQUAL "include/distribute/distribute.h")
    set(layer umbrella)
  elseif(path MATCHES "^include/distribute/([a-z_]+)/")
    set(layer ${CMAKE_MATCH_1})
  elseif(path MATCHES "^include/distribute/[a-z_]+\\.h$")
    set(layer base)
  elseif(path MATCHES "^src/cluster/mpi/")
    set(layer cluster_mpi)
  elseif(path MATCHES "^src/cluster/gloo/")
    set(layer cluster_gloo)
  elseif(path MATCHES "^src/([a-z_]+)/")
    set(layer ${CMAKE_MATCH_1})
  else()
    message(FATAL_ERROR "check_layers: ${path} lies in no layer; place it in a layer's folder")
  endif()
  if(NOT DEFINED allowed_${layer})
    message(FATAL_ERROR "check_layers: ${path} is in folder '${layer}', which is no known layer; add it to "
                        "tests/check_layers.cmake with the layers it may use")
  endif()
  set(${out} ${layer} PARENT_SCOPE)
endfunction()

set(violations "")

# Includes.
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/include/distribute/*.h ${SOURCE_DIR}/src/*.h
     ${SOURCE_DIR}/src/*.cc ${SOURCE_DIR}/src/*.cu)
set(checked_includes 0)
foreach(file IN LISTS files)
  layer_of(${file} from)
  file(STRINGS ${SOURCE_DIR}/${file} lines REGEX "^#include \"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    if(header STREQUAL "distribute/config.h")
      continue()  # generated: version and build options, base layer
    elseif(header MATCHES "^distribute/")
      set(target "include/${header}")
    elseif(EXISTS ${SOURCE_DIR}/src/${header})
      set(target "src/${header}")
    elseif(header MATCHES "^absl/")
      continue()
    else()
      get_filename_component(dir ${file} DIRECTORY)
      set(target "${dir}/${header}")
    endif()
    layer_of(${target} to)
    math(EXPR checked_includes "${checked_includes} + 1")
    if(NOT to IN_LIST allowed_${from})
      list(APPEND violations "include: ${file} (${from}) includes ${header} (${to})")
    endif()
  endforeach()
endforeach()

# Links.
file(GLOB_RECURSE all_objects RELATIVE ${OBJECT_DIR} ${OBJECT_DIR}/*.o)
set(objects "")
foreach(object IN LISTS all_objects)
  string(REGEX REPLACE "\\.o$" "" source "${object}")
  if(EXISTS ${SOURCE_DIR}/${source})  # not a leftover of a source since moved or removed
    list(APPEND objects ${object})
  endif()
endforeach()
set(defined_symbols "")
foreach(object IN LISTS objects)
  string(REGEX REPLACE "\\.o$" "" source "${object}")
  layer_of(${source} layer)
  execute_process(COMMAND ${NM} --defined-only ${OBJECT_DIR}/${object} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_layers: ${NM} failed on ${object}")
  endif()
  string(REGEX MATCHALL "[0-9a-f]+ [TDBR] _ZN10distribute[^\n]*" defs "${out}")
  foreach(def IN LISTS defs)
    string(REGEX REPLACE "^[0-9a-f]+ [TDBR] " "" symbol "${def}")
    set(definer_${symbol} ${layer})
  endforeach()
endforeach()
set(checked_symbols 0)
foreach(object IN LISTS objects)
  string(REGEX REPLACE "\\.o$" "" source "${object}")
  layer_of(${source} layer)
  execute_process(COMMAND ${NM} --undefined-only ${OBJECT_DIR}/${object} OUTPUT_VARIABLE out)
  string(REGEX MATCHALL "U _ZN10distribute[^\n]*" uses "${out}")
  foreach(use IN LISTS uses)
    string(REGEX REPLACE "^U " "" symbol "${use}")
    if(NOT DEFINED definer_${symbol})
      continue()
    endif()
    math(EXPR checked_symbols "${checked_symbols} + 1")
    if(NOT definer_${symbol} IN_LIST allowed_${layer})
      execute_process(COMMAND c++filt ${symbol} OUTPUT_VARIABLE readable OUTPUT_STRIP_TRAILING_WHITESPACE)
      list(APPEND violations "link: ${source} (${layer}) uses ${readable}, defined in layer ${definer_${symbol}}")
    endif()
  endforeach()
endforeach()

# The umbrella header as a user's program sees it.
set(probe ${CMAKE_CURRENT_BINARY_DIR}/umbrella_probe.cc)
file(WRITE ${probe} "#include <distribute/distribute.h>\nint main() { return 0; }\n")
set(include_flags "")
string(REPLACE "|" ";" include_dirs "${INCLUDE_DIRS}")
foreach(dir IN LISTS include_dirs)
  list(APPEND include_flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} -std=c++20 ${include_flags} -M ${probe}
                OUTPUT_VARIABLE deps ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  list(APPEND violations "umbrella: <distribute/distribute.h> does not compile with the public include directories "
                         "alone: ${errors}")
endif()
# Only the public include directories were given, so a private header could not even be found;
# this names the internals should one come back into the installed tree.
foreach(internal storage wait rendezvous barrier replica_group communicator fingerprint mutex)
  if(deps MATCHES "${SOURCE_DIR}/[^ ]*/${internal}\\.h")
    list(APPEND violations "umbrella: <distribute/distribute.h> includes ${internal}.h")
  endif()
endforeach()

if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "check_layers: dependencies that run upward or expose internals:\n  ${text}")
endif()
message(STATUS "check_layers: ${checked_includes} includes and ${checked_symbols} cross-object symbol uses point "
               "one way; the umbrella header includes no internals")
