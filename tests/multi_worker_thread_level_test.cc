// A program that initialised MPI itself below MPI_THREAD_SERIALIZED: the strategy cannot call MPI
// from its replica threads, says so with UnavailableError, and leaves the program's MPI alone
// (still initialised, not finalised). Run by ctest under `mpirun -np 2`.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "distribute/distribute.h"

namespace distribute {
namespace {

int g_provided = MPI_THREAD_SINGLE;

TEST(MultiWorkerThreadLevel, BelowSerializedIsUnavailableAndKeepsTheProgramsMpi) {
  if (g_provided >= MPI_THREAD_SERIALIZED) GTEST_SKIP() << "this MPI granted MPI_THREAD_SERIALIZED for FUNNELED";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0"};
  try {
    MultiWorkerMirroredStrategy strategy(options);
    ADD_FAILURE() << "no error";
  } catch (const UnavailableError& e) {
    EXPECT_EQ(std::string(e.what()),
              "MultiWorkerMirroredStrategy: MPI provides less than MPI_THREAD_SERIALIZED; the strategy calls MPI "
              "from its replica threads. Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let "
              "the strategy initialise it");
  }
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  EXPECT_EQ(initialized, 1);
  EXPECT_EQ(finalized, 0);
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &distribute::g_provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  MPI_Finalize();
  return failed;
}
