// Names of collectives, for the messages of every layer above.
#include "distribute/collective/internal/collective_op.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distribute::collective {

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kMergeCall: return "merge_call";
    case CollectiveKind::kReturn: return "return";
    case CollectiveKind::kReduceTo: return "cross-replica reduce";
    case CollectiveKind::kGatherTo: return "cross-replica gather";
    case CollectiveKind::kBroadcastTo: return "cross-replica broadcast";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kCheckpoint: return "checkpoint";
  }
  return "?";
}

std::string op_name(const CollectiveOp& op) { return absl::StrCat(kind_name(op.kind), " #", op.sequence); }

std::string replicas_text(const std::vector<int>& replicas) {
  return absl::StrCat(replicas.size() == 1 ? "replica " : "replicas ", absl::StrJoin(replicas, ", "));
}

}  // namespace distribute::collective
