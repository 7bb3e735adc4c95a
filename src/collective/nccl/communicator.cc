// The NCCL backend: per-replica communicators, packed all_reduce, broadcast-based all_gather, aborts.
#include "collective/nccl/communicator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "collective/compression.h"
#include "collective/nccl/nccl_error.h"
#include "device/cuda/compression_kernels.h"
#include "device/cuda/cuda_error.h"
#include "device/storage.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::collective::nccl {
namespace {

using detail::ReplicaDevice;

// Communicator creation on a busy machine can take seconds; it is bounded all the same.
constexpr auto kInitTimeout = std::chrono::seconds(120);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
  }
  throw InternalError("nccl_type: unknown dtype");
}

// Issues calls as one NCCL group; returns the first failure, else what the group's end returned.
template <class Calls>
ncclResult_t as_group(Calls calls) {
  ncclResult_t result = ncclGroupStart();
  if (result == ncclSuccess) result = calls();
  const ncclResult_t ended = ncclGroupEnd();
  return result == ncclSuccess || result == ncclInProgress ? ended : result;
}

// Issues calls 0..count-1 (each returning an ncclResult_t) as one NCCL group, or alone when there
// is one: a group costs about a microsecond, a fifth of a small collective. Returns the first
// failure, else what the group's end returned.
template <class Call>
ncclResult_t in_group(std::size_t count, Call call) {
  if (count == 0) return ncclSuccess;
  if (count == 1) return call(std::size_t{0});
  ncclResult_t result = ncclGroupStart();
  for (std::size_t i = 0; i < count && (result == ncclSuccess || result == ncclInProgress); ++i) result = call(i);
  const ncclResult_t ended = ncclGroupEnd();
  return result == ncclSuccess || result == ncclInProgress ? ended : result;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::vector<ReplicaDevice*> devices, std::optional<NcclSpan> span)
    : devices_(std::move(devices)), span_(std::move(span)), comms_(devices_.size(), nullptr), aborted_(devices_.size(), 0) {
  create_communicators();
}

NcclCommunicator::~NcclCommunicator() {
  // Runs end with every stream drained, so nothing is in flight; abort frees without a handshake.
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) ncclCommAbort(comm);
  }
}

void NcclCommunicator::create_communicators() {
  const int n = num_ranks();
  const int first = replica_id(0);
  ncclUniqueId id{};
  // Only the creating process makes an id: making one starts NCCL's bootstrap root, which waits
  // for every rank to connect.
  if (first == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) throw_nccl_error(r, nullptr, "creating an NCCL id");
  }
  if (span_) span_->share_id(std::as_writable_bytes(std::span(&id, 1)));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  int previous = 0;
  DISTRIBUTE_CUDA_CHECK(cudaGetDevice(&previous), "querying the current GPU");
  // One thread creates every rank's communicator inside a group, the documented pattern for
  // several GPUs per thread; each is then handed to its replica's thread.
  ncclResult_t result = ncclGroupStart();
  for (std::size_t r = 0; r < devices_.size() && (result == ncclSuccess || result == ncclInProgress); ++r) {
    cudaSetDevice(devices_[r]->memory_space());
    result = ncclCommInitRankConfig(&comms_[r], n, id, first + static_cast<int>(r), &config);
  }
  const ncclResult_t ended = ncclGroupEnd();
  cudaSetDevice(previous);
  if (result == ncclSuccess || result == ncclInProgress) result = ended;
  if (result != ncclSuccess && result != ncclInProgress) {
    throw_nccl_error(result, nullptr, absl::StrCat("creating ", devices_.size(), " NCCL communicators"));
  }
  const detail::Deadline deadline = detail::Clock::now() + kInitTimeout;
  for (std::size_t r = 0; r < devices_.size(); ++r) {
    ncclComm_t comm = comms_[r];
    const bool created = detail::poll_until(
        [&] {
          ncclResult_t state = ncclInProgress;
          if (ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess) state = q;
          if (state != ncclSuccess && state != ncclInProgress) {
            throw_nccl_error(state, comm, absl::StrCat("creating the NCCL communicator of replica ", first + r));
          }
          return state == ncclSuccess;
        },
        deadline);
    if (!created) {
      throw UnavailableError(absl::StrCat("creating the NCCL communicator of replica ", first + r,
                                          " took longer than ", kInitTimeout.count(), " s",
                                          span_ ? " (every worker must build its strategy)" : ""));
    }
  }
  std::fill(aborted_.begin(), aborted_.end(), 0);
}

void NcclCommunicator::begin_run() {
  bool broken = false;
  for (unsigned char a : aborted_) broken = broken || a != 0;
  if (!broken) return;
  DISTRIBUTE_CHECK(!span_, UnavailableError,
                   "the NCCL communicator spanning the workers was aborted after an NCCL error or a timeout in an "
                   "earlier run; collectives across workers cannot resume, build a new strategy on every worker");
  // A failed run aborted some communicators; the others are in an unknown state. Start afresh.
  for (std::size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r] != nullptr) ncclCommAbort(comms_[r]);
    comms_[r] = nullptr;
  }
  create_communicators();
}

void NcclCommunicator::abort(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  if (comms_[r] == nullptr || aborted_[r] != 0) return;
  ncclCommAbort(comms_[r]);
  comms_[r] = nullptr;
  aborted_[r] = 1;
}

void NcclCommunicator::fail(int rank, ncclResult_t result, const CollectiveOp& op) {
  const std::string message = nccl_error_message(result, comms_[static_cast<std::size_t>(rank)],
                                                 absl::StrCat(op_name(op), " on replica ", replica_id(rank)));
  abort(rank);
  throw_status(absl::Status(nccl_error_code(result), message));
}

void NcclCommunicator::wait(int rank, ncclResult_t started, const CollectiveOp& op) {
  if (started != ncclSuccess && started != ncclInProgress) fail(rank, started, op);
  ncclComm_t comm = comms_[static_cast<std::size_t>(rank)];
  const bool taken = detail::poll_until(
      [&] {
        ncclResult_t state = ncclInProgress;
        if (ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess) state = q;
        if (state == ncclSuccess) return true;
        if (state != ncclInProgress) fail(rank, state, op);
        // Across processes the operation was matched on every worker and completes; aborting it
        // would strand the other workers' kernels.
        if (!span_ && run_failed()) {
          abort(rank);
          throw AbortedError(absl::StrCat("replica ", rank, " left ", op_name(op),
                                          ": another replica failed, so its NCCL communicator was aborted"));
        }
        return false;
      },
      detail::deadline_after(op.options.timeout));
  if (taken) return;
  abort(rank);
  throw DeadlineExceededError(absl::StrCat("replica ", replica_id(rank), ": NCCL did not take ", op_name(op), " within ",
                                           op.options.timeout.count(), " s; its communicator was aborted",
                                           span_ ? " (it spans the workers: this strategy is unusable now)" : ""));
}

void NcclCommunicator::stage(int rank, CollectiveOp& op) {
  if (op.kind != CollectiveKind::kMergeCall) return;
  detail::wait_for_device_work(*devices_[static_cast<std::size_t>(rank)], rank, op.options.timeout,
                               [this] { return run_failed(); }, op_name(op));
}

void NcclCommunicator::prepare(std::span<CollectiveOp* const> ops) {
  const CollectiveOp& first = *ops[0];
  if (first.kind != CollectiveKind::kAllGather || span_) return;
  const std::size_t n = ops.size();
  gather_dims_.resize(first.inputs.size() * n);
  for (std::size_t leaf = 0; leaf < first.inputs.size(); ++leaf) {
    const Shape& shape = *first.inputs[leaf].shape;
    const int axis = gather_axis(first, shape);
    for (std::size_t r = 0; r < n; ++r) gather_dims_[leaf * n + r] = (*ops[r]->inputs[leaf].shape)[axis];
  }
}

void NcclCommunicator::all_reduce(int rank, std::span<CollectiveOp* const> ops) {
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  ncclComm_t comm = comms_[static_cast<std::size_t>(rank)];
  const auto stream = static_cast<cudaStream_t>(me.stream());
  // A pack is a run of leaves of one dtype whose outputs follow each other in the output block
  // (at most a cache line of alignment apart); the gaps are reduced too, which is harmless.
  struct Pack {
    std::size_t first, last;
    char* begin;
    std::size_t bytes;
    DType dtype;
  };
  constexpr std::size_t kMaxGap = 64;
  const std::size_t limit = mine.options.bytes_per_pack;
  absl::InlinedVector<Pack, 4> packs;
  absl::InlinedVector<std::size_t, 4> compressed_leaves;
  for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
    const BufferRef& in = mine.inputs[leaf];
    const std::size_t bytes = in.nbytes();
    if (bytes == 0) continue;
    if (compressed(mine, leaf)) {
      compressed_leaves.push_back(leaf);
      continue;
    }
    auto* data = static_cast<char*>(mine.output_data[leaf]);
    if (!packs.empty()) {
      Pack& p = packs.back();
      const char* end = p.begin + p.bytes;
      const auto extended = static_cast<std::size_t>(data + bytes - p.begin);
      if (p.dtype == in.dtype && data >= end && static_cast<std::size_t>(data - end) < kMaxGap &&
          (limit == 0 || extended <= limit)) {
        p.last = leaf;
        p.bytes = extended;
        continue;
      }
    }
    packs.push_back({leaf, leaf, data, bytes, in.dtype});
  }
  for (const Pack& p : packs) {
    if (p.first == p.last) continue;
    for (std::size_t leaf = p.first; leaf <= p.last; ++leaf) {
      // In place, the leaf is already where the pack reduces it.
      if (mine.output_data[leaf] != mine.inputs[leaf].data) {
        me.copy(mine.output_data[leaf], mine.inputs[leaf].data, mine.inputs[leaf].nbytes());
      }
    }
  }
  const ncclRedOp_t op = mine.op == ReduceOp::kMean ? ncclAvg : ncclSum;
  wait(rank, in_group(packs.size(), [&](std::size_t i) {
         const Pack& p = packs[i];
         const void* send = p.first == p.last ? mine.inputs[p.first].data : p.begin;
         return ncclAllReduce(send, p.begin, p.bytes / dtype_size(p.dtype), nccl_type(p.dtype), op, comm, stream);
       }),
       mine);
  if (!compressed_leaves.empty()) reduce_compressed(rank, mine, compressed_leaves, true);
}

bool NcclCommunicator::compressed(const CollectiveOp& op, std::size_t leaf) const {
  return op.options.compression != Compression::kNone && num_ranks() > 1 && op.inputs[leaf].dtype == DType::kFloat32 &&
         op.inputs[leaf].num_elements() != 0;
}

void NcclCommunicator::reduce_compressed(int rank, const CollectiveOp& mine, std::span<const std::size_t> leaves,
                                         bool whole) {
  using detail::gpu::WireFormat;
  const int n = num_ranks();
  const int my_id = replica_id(rank);
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  ncclComm_t comm = comms_[static_cast<std::size_t>(rank)];
  const auto stream = static_cast<cudaStream_t>(me.stream());
  const WireFormat format =
      mine.options.compression == Compression::kFloat16 ? WireFormat::kFloat16 : WireFormat::kBfloat16;
  const std::int64_t divide_by = mine.op == ReduceOp::kMean ? n : 1;
  // One slot per rank of the longest shard, rounded up to 128 bytes; the scratch holds the slots
  // sent, the slots received and the gathered sums, then this rank's overflow flag and everyone's.
  std::int64_t longest = 0;
  for (std::size_t leaf : leaves) longest = std::max(longest, shard_of(mine.inputs[leaf].num_elements(), n, 0).size);
  const std::int64_t slot = (longest + 63) / 64 * 64;
  const std::size_t slots_bytes = static_cast<std::size_t>(n * slot) * sizeof(std::uint16_t);
  detail::StorageRef scratch = detail::allocate_storage(me.device(), 3 * slots_bytes + static_cast<std::size_t>(n + 1) * sizeof(int));
  auto* base = static_cast<char*>(scratch->data());
  auto* sent = reinterpret_cast<std::uint16_t*>(base);
  auto* received = reinterpret_cast<std::uint16_t*>(base + slots_bytes);
  auto* sums = reinterpret_cast<std::uint16_t*>(base + 2 * slots_bytes);
  auto* overflow = reinterpret_cast<int*>(base + 3 * slots_bytes);
  int* overflows = overflow + 1;
  DISTRIBUTE_CUDA_CHECK(cudaMemsetAsync(overflow, 0, sizeof(int), stream), "clearing an overflow flag on ",
                        me.device().short_name());
  const auto slot_at = [&](std::uint16_t* slots, int p) { return slots + static_cast<std::int64_t>(p) * slot; };
  for (std::size_t leaf : leaves) {
    const BufferRef& in = mine.inputs[leaf];
    const std::int64_t count = in.num_elements();
    const auto* values = static_cast<const float*>(in.data);
    const Shard own = shard_of(count, n, my_id);
    DISTRIBUTE_CUDA_CHECK(
        detail::gpu::launch_narrow_into_slots(format, values, count, n, my_id, slot, sent, overflow, stream),
        "rounding ", count, " values to 16 bits on ", me.device().short_name());
    wait(rank, as_group([&] {
           ncclResult_t r = ncclSuccess;
           for (int p = 0; p < n && (r == ncclSuccess || r == ncclInProgress); ++p) {
             if (p == my_id) continue;
             const auto theirs = static_cast<std::size_t>(shard_of(count, n, p).size);
             if (theirs != 0) r = ncclSend(slot_at(sent, p), theirs * 2, ncclUint8, p, comm, stream);
             if (own.size != 0 && (r == ncclSuccess || r == ncclInProgress)) {
               r = ncclRecv(slot_at(received, p), static_cast<std::size_t>(own.size) * 2, ncclUint8, p, comm, stream);
             }
           }
           return r;
         }),
         mine);
    float* out32 = whole ? nullptr : static_cast<float*>(mine.output_data[leaf]);
    DISTRIBUTE_CUDA_CHECK(detail::gpu::launch_sum_slots(format, received, n, my_id, slot, values + own.begin, own.size,
                                                        slot_at(sums, my_id), out32, divide_by, overflow, stream),
                          "adding ", own.size, " values received in 16 bits on ", me.device().short_name());
    if (!whole) continue;
    wait(rank,
         ncclAllGather(slot_at(sums, my_id), sums, static_cast<std::size_t>(slot) * 2, ncclUint8, comm, stream), mine);
    DISTRIBUTE_CUDA_CHECK(detail::gpu::launch_widen_from_slots(format, sums, count, n, slot,
                                                               static_cast<float*>(mine.output_data[leaf]), divide_by,
                                                               stream),
                          "widening ", count, " 16-bit sums on ", me.device().short_name());
  }
  // Every rank learns every rank's flag, and so raises the same error.
  wait(rank, ncclAllGather(overflow, overflows, 1, ncclInt32, comm, stream), mine);
  std::vector<int> flags(static_cast<std::size_t>(n));
  me.copy(flags.data(), overflows, flags.size() * sizeof(int));
  detail::wait_for_device_work(me, rank, mine.options.timeout, [this] { return !span_ && run_failed(); }, op_name(mine));
  const auto first = std::find(flags.begin(), flags.end(), 1);
  if (first == flags.end()) return;
  const int overflowed = static_cast<int>(first - flags.begin());
  const int local = static_cast<int>(devices_.size());
  throw collective::overflow_error(
      op_name(mine), mine.options.compression,
      span_ ? absl::StrCat("worker ", overflowed / local, " (replica ", overflowed, ")") : absl::StrCat("replica ", overflowed),
      span_ ? "workers'" : "replicas'");
}

void NcclCommunicator::reduce_scatter(int rank, std::span<CollectiveOp* const> ops) {
  const std::int64_t n = num_ranks();
  const int my_id = replica_id(rank);
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  ncclComm_t comm = comms_[static_cast<std::size_t>(rank)];
  const auto stream = static_cast<cudaStream_t>(me.stream());
  const ncclRedOp_t op = mine.op == ReduceOp::kMean ? ncclAvg : ncclSum;
  // A leaf whose shards are equal is one ncclReduceScatter; uneven shards are one ncclReduce
  // each, to the rank that keeps it (the same traffic). Every rank issues the same list.
  struct Step {
    std::size_t leaf;
    int root;  // -1: the leaf's ncclReduceScatter
  };
  absl::InlinedVector<Step, 8> steps;
  absl::InlinedVector<std::size_t, 4> compressed_leaves;
  for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
    const std::int64_t count = mine.inputs[leaf].num_elements();
    if (count == 0) continue;
    if (compressed(mine, leaf)) {
      compressed_leaves.push_back(leaf);
      continue;
    }
    if (count % n == 0) {
      steps.push_back({leaf, -1});
      continue;
    }
    for (int root = 0; root < n; ++root) {
      if (shard_of(count, n, root).size != 0) steps.push_back({leaf, root});
    }
  }
  wait(rank, in_group(steps.size(), [&](std::size_t i) {
         const Step& step = steps[i];
         const BufferRef& in = mine.inputs[step.leaf];
         void* out = mine.output_data[step.leaf];
         if (step.root < 0) {
           return ncclReduceScatter(in.data, out, static_cast<std::size_t>(in.num_elements() / n),
                                    nccl_type(in.dtype), op, comm, stream);
         }
         const Shard shard = shard_of(in.num_elements(), n, step.root);
         const char* send = static_cast<const char*>(in.data) + static_cast<std::size_t>(shard.begin) * dtype_size(in.dtype);
         return ncclReduce(send, step.root == my_id ? out : nullptr, static_cast<std::size_t>(shard.size),
                           nccl_type(in.dtype), op, step.root, comm, stream);
       }),
       mine);
  if (!compressed_leaves.empty()) reduce_compressed(rank, mine, compressed_leaves, false);
}

void NcclCommunicator::all_gather(int rank, std::span<CollectiveOp* const> ops) {
  const auto n = static_cast<std::size_t>(num_ranks());
  const auto my_id = static_cast<std::size_t>(replica_id(rank));
  CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  ncclComm_t comm = comms_[static_cast<std::size_t>(rank)];
  const auto stream = static_cast<cudaStream_t>(me.stream());
  // Every replica's part lands contiguously: in the output itself when the axis is the outermost
  // dimension, else in a scratch block laid out rows-after-rows and copied with strides after.
  struct Placement {
    char* out;
    char* landing;
    std::size_t unit, rows;
    std::int64_t total;
  };
  absl::InlinedVector<Placement, 4> placements;
  std::vector<detail::StorageRef> scratch;
  for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
    const Shape& shape = *mine.inputs[leaf].shape;
    const int axis = gather_axis(mine, shape);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < n; ++r) total += gather_dims_[leaf * n + r];
    auto* out = static_cast<char*>(mine.allocate_output(mine.allocate_context, leaf, shape.with_dim(axis, total)));
    const std::size_t unit = static_cast<std::size_t>(shape.inner_size(axis)) * dtype_size(mine.inputs[leaf].dtype);
    const auto rows = static_cast<std::size_t>(shape.outer_size(axis));
    char* landing = out;
    if (rows > 1) {
      scratch.push_back(detail::allocate_storage(me.device(), rows * static_cast<std::size_t>(total) * unit));
      landing = static_cast<char*>(scratch.back()->data());
    }
    placements.push_back({out, landing, unit, rows, total});
  }
  // One broadcast per (leaf, replica) with something to send: uneven sizes are allowed. In place
  // (gather_in_place, rank 1), a root's send buffer is its own part of the landing: NCCL's
  // in-place broadcast.
  struct Part {
    const void* send;
    char* landing;
    std::size_t bytes;
    int root;
  };
  absl::InlinedVector<Part, 8> parts;
  for (std::size_t leaf = 0; leaf < placements.size(); ++leaf) {
    const Placement& p = placements[leaf];
    std::size_t offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t bytes = static_cast<std::size_t>(gather_dims_[leaf * n + r]) * p.unit * p.rows;
      if (bytes != 0) {
        parts.push_back({r == my_id ? mine.inputs[leaf].data : nullptr, p.landing + offset,
                         bytes, static_cast<int>(r)});
      }
      offset += bytes;
    }
  }
  wait(rank, in_group(parts.size(), [&](std::size_t i) {
         const Part& part = parts[i];
         return ncclBroadcast(part.send, part.landing, part.bytes, ncclInt8, part.root, comm, stream);
       }),
       mine);
  for (std::size_t leaf = 0; leaf < placements.size(); ++leaf) {
    const Placement& p = placements[leaf];
    if (p.rows <= 1) continue;
    std::size_t column = 0;
    std::size_t offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t width = static_cast<std::size_t>(gather_dims_[leaf * n + r]) * p.unit;
      me.copy_rows(p.out + column, static_cast<std::size_t>(p.total) * p.unit, p.landing + offset, width, width, p.rows);
      column += width;
      offset += width * p.rows;
    }
  }
}

}  // namespace distribute::collective::nccl
