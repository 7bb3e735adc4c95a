// The comparison of the replicas' calls to one collective, and the errors that name who differed.
#include "replica/fingerprint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

using collective::BufferRef;
using collective::CollectiveKind;
using collective::kind_name;

// Splits the replicas into classes of equal calls (by `same`) and returns them with the
// reference class first: the largest, preferring one that `preferred` accepts, then the one
// holding the lowest replica id.
template <class Same, class Preferred>
std::vector<std::vector<int>> classes_of(std::span<CollectiveCall* const> calls, Same&& same,
                                         Preferred&& preferred) {
  std::vector<std::vector<int>> classes;
  for (int r = 0; r < static_cast<int>(calls.size()); ++r) {
    auto it = std::find_if(classes.begin(), classes.end(), [&](const std::vector<int>& c) {
      return same(*calls[static_cast<std::size_t>(c[0])], *calls[static_cast<std::size_t>(r)]);
    });
    if (it == classes.end()) {
      classes.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  std::stable_sort(classes.begin(), classes.end(), [&](const auto& a, const auto& b) {
    const bool pa = preferred(*calls[static_cast<std::size_t>(a[0])]);
    const bool pb = preferred(*calls[static_cast<std::size_t>(b[0])]);
    if (pa != pb) return pa;
    return a.size() > b.size();
  });
  return classes;
}

template <class Same>
std::vector<std::vector<int>> classes_of(std::span<CollectiveCall* const> calls, Same&& same) {
  return classes_of(calls, same, [](const CollectiveCall&) { return true; });
}

int normalized_axis(int axis, const Shape& shape) { return axis < 0 ? axis + shape.rank() : axis; }

// all_gather's axis as it applies to the call's first leaf (-1 and rank-1 are the same axis).
int gather_axis(const CollectiveCall& call) {
  return call.op.inputs.empty() ? call.op.axis : normalized_axis(call.op.axis, *call.op.inputs[0].shape);
}

std::string leaf_text(const BufferRef& leaf) { return absl::StrCat(dtype_name(leaf.dtype), leaf.shape->compact()); }

// "all_reduce #3: replica 1 passed X, replicas 0, 2 passed Y"
// Replica r's name in messages: its global id, first_id + r.
std::string named(std::vector<int> replicas, int first_id) {
  for (int& r : replicas) r += first_id;
  return replicas_text(replicas);
}

template <class Describe>
std::string value_mismatch(const std::string& prefix, std::span<CollectiveCall* const> calls,
                           const std::vector<std::vector<int>>& classes, int first_id, Describe&& describe) {
  std::vector<std::string> parts;
  for (std::size_t c = 1; c < classes.size(); ++c) {
    parts.push_back(absl::StrCat(named(classes[c], first_id), " passed ",
                                 describe(*calls[static_cast<std::size_t>(classes[c][0])])));
  }
  parts.push_back(absl::StrCat(named(classes[0], first_id), " passed ",
                               describe(*calls[static_cast<std::size_t>(classes[0][0])])));
  return absl::StrCat(prefix, ": ", absl::StrJoin(parts, ", "));
}

std::exception_ptr invalid(std::string message) {
  return std::make_exception_ptr(InvalidArgumentError(message));
}

// For all_gather, the axes are compared as normalised for the leaf's rank, so -1 and rank-1 agree.
bool same_leaf(const CollectiveCall& ca, const BufferRef& a, const CollectiveCall& cb, const BufferRef& b) {
  if (a.dtype != b.dtype) return false;
  if (ca.op.kind != CollectiveKind::kAllGather) return *a.shape == *b.shape;
  if (a.shape->rank() != b.shape->rank()) return false;
  const int axis = normalized_axis(ca.op.axis, *a.shape);
  if (axis != normalized_axis(cb.op.axis, *b.shape)) return false;
  for (int d = 0; d < a.shape->rank(); ++d) {
    if (d != axis && (*a.shape)[d] != (*b.shape)[d]) return false;
  }
  return true;
}

}  // namespace

std::string replicas_text(const std::vector<int>& replicas) {
  return absl::StrCat(replicas.size() == 1 ? "replica " : "replicas ", absl::StrJoin(replicas, ", "));
}

std::exception_ptr compare_calls(std::span<CollectiveCall* const> calls, int first_id) {
  const CollectiveCall& first = *calls[0];
  bool all_same_kind = true;
  for (CollectiveCall* call : calls) all_same_kind &= call->op.kind == first.op.kind;

  if (!all_same_kind) {
    auto classes = classes_of(
        calls, [](const CollectiveCall& a, const CollectiveCall& b) { return a.op.kind == b.op.kind; },
        [](const CollectiveCall& c) { return c.op.kind != CollectiveKind::kReturn; });
    const CollectiveCall& ref = *calls[static_cast<std::size_t>(classes[0][0])];
    std::vector<std::string> parts;
    for (std::size_t c = 1; c < classes.size(); ++c) {
      const CollectiveCall& other = *calls[static_cast<std::size_t>(classes[c][0])];
      if (other.op.kind == CollectiveKind::kReturn) {
        parts.push_back(absl::StrCat(named(classes[c], first_id), " returned from the replica function while ",
                                     named(classes[0], first_id), (classes[0].size() == 1 ? " waits in " : " wait in "), kind_name(ref.op.kind),
                                     " (collective #", ref.op.sequence, ")"));
      } else {
        parts.push_back(absl::StrCat(named(classes[c], first_id), " called ", kind_name(other.op.kind),
                                     " where ", named(classes[0], first_id), " called ", kind_name(ref.op.kind),
                                     " (collective #", ref.op.sequence, ")"));
      }
    }
    return std::make_exception_ptr(FailedPreconditionError(absl::StrCat(
        absl::StrJoin(parts, "; "),
        ". Every replica must make the same collective calls in the same order.")));
  }
  if (first.op.kind == CollectiveKind::kReturn) return nullptr;

  // Built only on a mismatch: the matching path allocates nothing.
  auto prefix = [&] { return call_name(first); };
  auto differs = [&](auto&& same) {
    for (CollectiveCall* call : calls) {
      if (!same(first, *call)) return true;
    }
    return false;
  };

  if (first.op.kind == CollectiveKind::kMergeCall) {
    auto same = [](const CollectiveCall& a, const CollectiveCall& b) { return a.merge_type == b.merge_type; };
    if (differs(same)) {
      auto classes = classes_of(calls, same);
      return std::make_exception_ptr(FailedPreconditionError(absl::StrCat(
          prefix(), ": ", named(classes[1], first_id), " passed a merge_fn or arguments of other types than ",
          named(classes[0], first_id), "; every replica must call merge_call with the same function")));
    }
    return nullptr;
  }

  if (first.op.kind == CollectiveKind::kAllReduce) {
    auto same = [](const CollectiveCall& a, const CollectiveCall& b) { return a.op.op == b.op.op; };
    if (differs(same)) {
      return invalid(value_mismatch(prefix(), calls, classes_of(calls, same), first_id, [](const CollectiveCall& c) {
        return absl::StrCat("reduce op ", reduce_op_name(c.op.op));
      }));
    }
  } else {
    auto same = [](const CollectiveCall& a, const CollectiveCall& b) { return gather_axis(a) == gather_axis(b); };
    if (differs(same)) {
      return invalid(value_mismatch(prefix(), calls, classes_of(calls, same), first_id,
                                    [](const CollectiveCall& c) { return absl::StrCat("axis=", gather_axis(c)); }));
    }
  }

  auto same_structure = [](const CollectiveCall& a, const CollectiveCall& b) {
    return a.structure_hash == b.structure_hash && a.op.inputs.size() == b.op.inputs.size();
  };
  if (differs(same_structure)) {
    return invalid(value_mismatch(prefix(), calls, classes_of(calls, same_structure), first_id, [](const CollectiveCall& c) {
      return c.describe_structure(c.value);
    }) + "; the nest structure must be the same on every replica");
  }

  auto same_digest = [](const CollectiveCall& a, const CollectiveCall& b) { return a.leaf_digest == b.leaf_digest; };
  // Leaf by leaf only to name the first leaf that differs.
  const bool leaves_differ = differs(same_digest);
  for (std::size_t leaf = 0; leaves_differ && leaf < first.op.inputs.size(); ++leaf) {
    auto same = [&](const CollectiveCall& a, const CollectiveCall& b) {
      return same_leaf(a, a.op.inputs[leaf], b, b.op.inputs[leaf]);
    };
    if (differs(same)) {
      std::string where = first.op.inputs.size() > 1 ? absl::StrCat(" (leaf ", leaf, ")") : "";
      std::string hint = first.op.kind == CollectiveKind::kAllGather
                             ? absl::StrCat("; all_gather needs the same dtype, rank and dimensions except axis ",
                                            normalized_axis(first.op.axis, *first.op.inputs[leaf].shape))
                             : "; all_reduce needs the same dtype and shape on every replica";
      return invalid(value_mismatch(prefix() + where, calls, classes_of(calls, same), first_id, [&](const CollectiveCall& c) {
        return leaf_text(c.op.inputs[leaf]);
      }) + hint);
    }
  }

  auto same_options = [](const CollectiveCall& a, const CollectiveCall& b) {
    return a.op.options.implementation == b.op.options.implementation &&
           a.op.options.bytes_per_pack == b.op.options.bytes_per_pack;
  };
  if (differs(same_options)) {
    return invalid(value_mismatch(prefix(), calls, classes_of(calls, same_options), first_id, [](const CollectiveCall& c) {
      return absl::StrCat("options {implementation=", implementation_name(c.op.options.implementation),
                          ", bytes_per_pack=", c.op.options.bytes_per_pack, "}");
    }));
  }
  return nullptr;
}

std::string call_name(const CollectiveCall& call) { return collective::op_name(call.op); }

}  // namespace distribute::detail
