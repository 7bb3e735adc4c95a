// What the umbrella header declares for the MPI component when this build of distribute has none
// (DISTRIBUTE_HAS_MPI is 0): each public name of the component is a type that, once a program
// uses it, fails to compile saying why, instead of an undeclared name or undefined symbols at
// link time.
#pragma once

#include "distribute/config.h"

#if DISTRIBUTE_HAS_MPI
#error "distribute/mpi/unavailable.h is for builds without the MPI component; include distribute/distribute.h"
#endif

namespace distribute {
namespace detail {

template <class Name>
inline constexpr bool kMpiComponentBuilt = false;

template <class Name>
struct MpiComponentNotBuilt {
  static_assert(kMpiComponentBuilt<Name>,
                "this build of distribute has no MPI component, which MultiWorkerMirroredStrategy, its options "
                "and MpiClusterResolver belong to: install Open MPI (Debian: libopenmpi-dev "
                "openmpi-bin), configure distribute with -DDISTRIBUTE_WITH_MPI=ON, reinstall it, and link "
                "distribute::mpi (find_package(distribute CONFIG REQUIRED COMPONENTS mpi))");
};

}  // namespace detail

using MultiWorkerMirroredStrategy = detail::MpiComponentNotBuilt<struct MultiWorkerMirroredStrategyName>;
using MultiWorkerMirroredStrategyOptions = detail::MpiComponentNotBuilt<struct MultiWorkerMirroredStrategyOptionsName>;
using MpiClusterResolver = detail::MpiComponentNotBuilt<struct MpiClusterResolverName>;

}  // namespace distribute
