// What the umbrella header declares for the multi-worker names this build of distribute lacks
// (DISTRIBUTE_HAS_MPI is 0): MpiClusterResolver, and where no backend at all was built
// (DISTRIBUTE_HAS_MULTI_WORKER is 0) MultiWorkerMirroredStrategy and its options too. Each is a type
// that, once a program uses it, fails to compile saying why, instead of an undeclared name or
// undefined symbols at link time.
#pragma once

#include "distribute/config.h"

#if DISTRIBUTE_HAS_MPI
#error "distribute/mpi/unavailable.h is for builds without the MPI component; include distribute/distribute.h"
#endif

namespace distribute {
namespace detail {

template <class Name>
inline constexpr bool kComponentBuilt = false;

template <class Name>
struct MpiComponentNotBuilt {
  static_assert(kComponentBuilt<Name>,
                "this build of distribute has no MPI component, which MpiClusterResolver belongs to: install Open "
                "MPI (Debian: libopenmpi-dev openmpi-bin), configure distribute with -DDISTRIBUTE_WITH_MPI=ON, "
                "reinstall it, and link distribute::mpi (find_package(distribute CONFIG REQUIRED COMPONENTS mpi))");
};

template <class Name>
struct MultiWorkerNotBuilt {
  static_assert(kComponentBuilt<Name>,
                "this build of distribute has no multi-worker backend, which MultiWorkerMirroredStrategy and its "
                "options belong to: install Open MPI (Debian: libopenmpi-dev openmpi-bin) or Gloo (libgloo-dev), "
                "configure distribute with -DDISTRIBUTE_WITH_MPI=ON or -DDISTRIBUTE_WITH_GLOO=ON, reinstall it, "
                "and link distribute::mpi or distribute::gloo (find_package(distribute CONFIG REQUIRED "
                "COMPONENTS gloo))");
};

}  // namespace detail

#if !DISTRIBUTE_HAS_MULTI_WORKER
using MultiWorkerMirroredStrategy = detail::MultiWorkerNotBuilt<struct MultiWorkerMirroredStrategyName>;
using MultiWorkerMirroredStrategyOptions = detail::MultiWorkerNotBuilt<struct MultiWorkerMirroredStrategyOptionsName>;
#endif
using MpiClusterResolver = detail::MpiComponentNotBuilt<struct MpiClusterResolverName>;

}  // namespace distribute
