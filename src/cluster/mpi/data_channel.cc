// MpiDataChannel: all_reduce (in MPI_Iallreduce or around a ring), all_gather and broadcast, in
// pieces.
#include "cluster/mpi/data_channel.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cluster/ring_all_reduce.h"
#include "device/kernels.h"
#include "distribute/errors.h"

namespace distribute::cluster::mpi {

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    default: break;
  }
  throw InternalError(absl::StrCat("MpiWorkerTransport: no MPI type for ", dtype_name(dtype)));
}

// float16 and bfloat16 cross the workers as float32, MPI having no type for them: each worker's
// sum is widened, the workers' sums are added in float32, and the total is rounded once.
template <class T>
int all_reduce_widened(MpiDataChannel& channel, void* data, std::int64_t count, detail::Deadline deadline,
                       const StepName& what) {
  T* values = static_cast<T*>(data);
  std::vector<float> wide(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) wide[static_cast<std::size_t>(i)] = static_cast<float>(values[i]);
  channel.all_reduce(DType::kFloat32, wide.data(), count, Compression::kNone, deadline, what);
  for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(wide[static_cast<std::size_t>(i)]);
  return -1;
}

}  // namespace

class MpiDataChannel::RingLinks final : public cluster::RingLinks {
 public:
  RingLinks(MpiDataChannel& channel, detail::Deadline deadline, const StepName& what)
      : channel_(channel), deadline_(deadline), what_(what) {}
  int rank() const override { return channel_.slot_.rank(); }
  int size() const override { return channel_.slot_.size(); }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    const int next = (rank() + 1) % size();
    const int previous = (rank() + size() - 1) % size();
    // Each way in messages of at most kRingMessageBytes, all posted at once. One large message
    // each way sometimes crossed at half the link's rate (Open MPI's TCP transport then sent one
    // direction's data before the other's): a 30 MiB exchange between 2 hosts took 263 or 500 ms
    // at 1 Gbit/s, and 263-283 ms in 1 MiB messages.
    std::vector<MPI_Request>& requests = requests_;  // kept across the call's steps: no allocation per step
    requests.clear();
    int posted = MPI_SUCCESS;
    const char* call = "MPI_Irecv";
    {
      NonBlockingMpiLock lock;
      for (std::size_t at = 0; at < from_previous.size() && posted == MPI_SUCCESS; at += kRingMessageBytes) {
        requests.push_back(MPI_REQUEST_NULL);
        posted = MPI_Irecv(from_previous.data() + at, static_cast<int>(std::min(kRingMessageBytes, from_previous.size() - at)),
                           MPI_BYTE, previous, kRingTag, channel_.slot_.comm(), &requests.back());
      }
      if (posted == MPI_SUCCESS) call = "MPI_Isend";
      for (std::size_t at = 0; at < to_next.size() && posted == MPI_SUCCESS; at += kRingMessageBytes) {
        requests.push_back(MPI_REQUEST_NULL);
        posted = MPI_Isend(to_next.data() + at, static_cast<int>(std::min(kRingMessageBytes, to_next.size() - at)),
                           MPI_BYTE, next, kRingTag, channel_.slot_.comm(), &requests.back());
      }
    }
    if (posted != MPI_SUCCESS) {
      // Those that were posted still reach into the step's buffers.
      channel_.abandon(requests);
      check(posted, call);
    }
    channel_.wait(requests, deadline_, what_);
  }

 private:
  MpiDataChannel& channel_;
  const detail::Deadline deadline_;
  const StepName& what_;
  std::vector<MPI_Request> requests_;
};

void MpiDataChannel::wait(std::span<MPI_Request> requests, detail::Deadline deadline, const StepName& what) {
  try {
    stall_.wait_for_data(requests, deadline, what);
  } catch (...) {
    abandon(requests);
    throw;
  }
}

void MpiDataChannel::abandon(std::span<MPI_Request> requests) {
  stall_.abandon(requests, {&ring_scratch_, &data_scratch_});
}

std::byte* MpiDataChannel::workspace(void* data, std::size_t bytes) {
  if (stall_.on_stall() == OnStall::kEndJob) return static_cast<std::byte*>(data);
  // Grown only: a vector zero-fills what it grows by, which a smaller call between two large ones
  // would make every large one pay.
  if (data_scratch_.size() < bytes) data_scratch_.resize(bytes);
  return data_scratch_.data();
}

int MpiDataChannel::all_reduce(DType dtype, void* data, std::int64_t count, Compression compression,
                               detail::Deadline deadline, const StepName& what) {
  if (slot_.size() == 1 || count == 0) return -1;
  if (dtype == DType::kFloat16) return all_reduce_widened<Half>(*this, data, count, deadline, what);
  if (dtype == DType::kBFloat16) return all_reduce_widened<BFloat16>(*this, data, count, deadline, what);
  if (dtype != DType::kFloat32) compression = Compression::kNone;
  const MPI_Datatype type = mpi_type(dtype);
  const std::size_t unit = dtype_size(dtype);
  const std::size_t piece = stall_.on_stall() == OnStall::kEndJob ? kMaxRingBytesPerCall : kMaxBytesPerCall;
  const auto per_call = static_cast<std::int64_t>(piece / unit);
  auto* bytes = static_cast<std::byte*>(data);
  RingLinks ring(*this, deadline, what);
  int overflowed = -1;
  for (std::int64_t at = 0; at < count; at += per_call) {
    const std::int64_t n = std::min(per_call, count - at);
    std::byte* part = bytes + static_cast<std::size_t>(at) * unit;
    const std::size_t part_bytes = static_cast<std::size_t>(n) * unit;
    std::byte* work = workspace(part, part_bytes);
    if (work != part) std::memcpy(work, part, part_bytes);
    if (compression != Compression::kNone) {
      // Every size goes around the ring: MPI has no 16-bit sum that adds in float32.
      const int worker = ring_all_reduce_compressed(ring, compression, reinterpret_cast<float*>(work), n, ring_scratch_);
      if (worker >= 0 && (overflowed < 0 || worker < overflowed)) overflowed = worker;
    } else if (part_bytes >= kMinRingBytes) {
      ring_all_reduce(ring, dtype, work, n, ring_scratch_);
    } else {
      MPI_Request request;
      {
        NonBlockingMpiLock lock;
        check(MPI_Iallreduce(MPI_IN_PLACE, work, static_cast<int>(n), type, MPI_SUM, slot_.comm(), &request),
              "MPI_Iallreduce");
      }
      wait(std::span(&request, 1), deadline, what);
    }
    if (work != part) std::memcpy(part, work, part_bytes);
  }
  return overflowed;
}

void MpiDataChannel::all_gather(const void* mine, std::span<const std::size_t> sizes, void* out,
                                detail::Deadline deadline, const StepName& what) {
  std::vector<int> counts;
  std::vector<int> displacements;
  std::size_t total = 0;
  for (std::size_t s : sizes) {
    if (total + s > static_cast<std::size_t>(INT_MAX)) {
      throw UnimplementedError(absl::StrCat(what.str(), ": gathering more than 2 GiB across workers is not supported"));
    }
    counts.push_back(static_cast<int>(s));
    displacements.push_back(static_cast<int>(total));
    total += s;
  }
  if (slot_.size() == 1) {
    if (total != 0) std::memcpy(out, mine, total);
    return;
  }
  const auto me = static_cast<std::size_t>(slot_.rank());
  std::byte* work = workspace(out, total);
  const void* from = mine;
  if (work != out) {
    // This worker's part goes where the others' will: MPI_IN_PLACE, so that MPI reads no
    // caller's memory either.
    if (counts[me] != 0) std::memcpy(work + displacements[me], mine, sizes[me]);
    from = MPI_IN_PLACE;
  }
  MPI_Request request;
  {
    NonBlockingMpiLock lock;
    check(MPI_Iallgatherv(from, counts[me], MPI_BYTE, work, counts.data(), displacements.data(), MPI_BYTE,
                          slot_.comm(), &request),
          "MPI_Iallgatherv");
  }
  wait(std::span(&request, 1), deadline, what);
  if (work != out && total != 0) std::memcpy(out, work, total);
}

void MpiDataChannel::broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline,
                               const StepName& what) {
  if (slot_.size() == 1) return;
  auto* at = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < bytes; done += kMaxBytesPerCall) {
    const std::size_t n = std::min(kMaxBytesPerCall, bytes - done);
    std::byte* part = at + done;
    std::byte* work = workspace(part, n);
    if (work != part && slot_.rank() == root) std::memcpy(work, part, n);
    MPI_Request request;
    {
      NonBlockingMpiLock lock;
      check(MPI_Ibcast(work, static_cast<int>(n), MPI_BYTE, root, slot_.comm(), &request), "MPI_Ibcast");
    }
    wait(std::span(&request, 1), deadline, what);
    if (work != part && slot_.rank() != root) std::memcpy(part, work, n);
  }
}

}  // namespace distribute::cluster::mpi
