// CommunicatorSlots and CommunicatorSlot: the communicators of the strategies, kept for the next.
#include "cluster/mpi/communicator_slots.h"

#include <algorithm>
#include <random>

namespace distribute::cluster::mpi {

CommunicatorSlots::OfBase& CommunicatorSlots::slots_of(MPI_Comm base) {
  auto it = std::find_if(bases_.begin(), bases_.end(), [&](const OfBase& s) { return s.base == base; });
  if (it != bases_.end() && !it->pairs.empty()) {
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(it->pairs[0][0], base, &same);
    if (same != MPI_CONGRUENT) it = bases_.erase(it), it = bases_.end();
  }
  if (it == bases_.end()) it = bases_.insert(bases_.end(), OfBase{.base = base});
  std::int64_t counts[2] = {static_cast<std::int64_t>(it->pairs.size()), -static_cast<std::int64_t>(it->pairs.size())};
  check(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT64_T, MPI_MAX, base), "MPI_Allreduce");
  if (counts[0] != -counts[1]) *it = OfBase{.base = base};
  return *it;
}

CommunicatorSlots::Taken CommunicatorSlots::take(MPI_Comm base) {
  OfBase& slots = slots_of(base);
  // The lowest slot free on every worker, else a new one.
  std::vector<char> free(slots.pairs.size());
  for (std::size_t k = 0; k < free.size(); ++k) free[k] = slots.in_use[k] ? 0 : 1;
  if (!free.empty()) {
    check(MPI_Allreduce(MPI_IN_PLACE, free.data(), static_cast<int>(free.size()), MPI_CHAR, MPI_BAND, base),
          "MPI_Allreduce");
  }
  const int index = static_cast<int>(std::find(free.begin(), free.end(), 1) - free.begin());
  if (index == static_cast<int>(slots.pairs.size())) {
    std::array<MPI_Comm, 2> pair{MPI_COMM_NULL, MPI_COMM_NULL};
    check(MPI_Comm_dup(base, &pair[0]), "MPI_Comm_dup");
    check(MPI_Comm_dup(base, &pair[1]), "MPI_Comm_dup");
    int rank = 0;
    MPI_Comm_rank(base, &rank);
    MPI_Comm host;
    check(MPI_Comm_split_type(base, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
    int on_host = 1;
    MPI_Comm_size(host, &on_host);
    MPI_Comm_free(&host);
    slots.pairs.push_back(pair);
    slots.in_use.push_back(0);
    slots.on_host = on_host;
    slots.hosts = processor_names(base);
  }
  const auto k = static_cast<std::size_t>(index);
  slots.in_use[k] = 1;
  return Taken{index, slots.pairs[k][0], slots.pairs[k][1], slots.on_host, slots.hosts};
}

void CommunicatorSlots::give_back(MPI_Comm base, int index, MPI_Comm comm) {
  const auto k = static_cast<std::size_t>(index);
  for (OfBase& slots : bases_) {
    if (slots.base == base && k < slots.pairs.size() && slots.pairs[k][0] == comm) slots.in_use[k] = 0;
  }
}

CommunicatorSlot::CommunicatorSlot(MPI_Comm base) : base_(base) {
  MpiRuntime::instance().ensure_initialized();
  detail::MutexLock lock(MpiRuntime::instance().mutex());
  CommunicatorSlots::Taken taken = MpiRuntime::instance().slots().take(base);
  index_ = taken.index;
  comm_ = taken.comm;
  probe_comm_ = taken.probe_comm;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  on_host_ = taken.on_host;
  hosts_ = std::move(taken.hosts);
  if (rank_ == 0) nonce_ = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  check(MPI_Bcast(&nonce_, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
}

void CommunicatorSlot::give_up() {
  reusable_ = false;
  MpiRuntime::instance().lose_contact();
}

void CommunicatorSlot::release() {
  if (reusable_) MpiRuntime::instance().slots().give_back(base_, index_, comm_);
}

}  // namespace distribute::cluster::mpi
