// Call signatures: the digest, the rendering and the error naming who differed.
#include "replica/call_signature.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

using collective::BufferRef;
using collective::CollectiveKind;

// One word into the digest: the multiplication spreads each bit upwards, the shift brings the
// high half back down.
std::uint64_t mix(std::uint64_t h, std::uint64_t word) {
  h = (h ^ word) * 0x9e3779b97f4a7c15;
  return h ^ (h >> 32);
}

bool gathers(CollectiveKind kind) { return kind == CollectiveKind::kAllGather || kind == CollectiveKind::kGatherTo; }

// The axis a leaf is gathered or reduced along (normalised for its rank), or -1 for none. A
// cross-replica reduce carries its axis normalised already, -1 meaning axis=None.
int open_axis(const collective::CollectiveOp& op, const Shape& shape) {
  if (op.kind == CollectiveKind::kReduceTo) return op.axis;
  if (!gathers(op.kind)) return -1;
  return collective::gather_axis(op, shape);
}

// The axis of the call as its first leaf normalises it (-1 and rank-1 are the same axis).
int call_axis(const collective::CollectiveOp& op) {
  return op.inputs.empty() ? op.axis : open_axis(op, *op.inputs[0].shape);
}

std::string hex(std::uint64_t word) { return absl::StrCat(absl::Hex(word, absl::kZeroPad16)); }

std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  return status == 0 ? std::string(demangled.get()) : std::string(type.name());
}

std::string variable_text(const CallPurpose& purpose, const VariableKey& v) {
  return absl::StrCat(purpose.action, " of '", v.name != nullptr ? *v.name : std::string("?"), "'");
}

// "assign of 'a'", "SGD.apply_gradients of 'w1', 'w2', 'b1' and 3 more".
std::string purpose_text(const CallPurpose& purpose) {
  constexpr std::size_t kNamed = 3;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < purpose.variables.size() && i < kNamed; ++i) {
    names.push_back(absl::StrCat("'", *purpose.variables[i].name, "'"));
  }
  std::string text = absl::StrCat(purpose.action, " of ", absl::StrJoin(names, ", "));
  if (purpose.variables.size() > kNamed) absl::StrAppend(&text, " and ", purpose.variables.size() - kNamed, " more");
  return text;
}

// Splits the parties into classes of equal keys, the reference class first: the largest,
// preferring one that `preferred` accepts, then the one holding the lowest index.
template <class Key, class Preferred>
std::vector<std::vector<int>> classes_of(int n, Key&& key, Preferred&& preferred) {
  std::vector<std::vector<int>> classes;
  for (int p = 0; p < n; ++p) {
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return key(c[0]) == key(p); });
    if (it == classes.end()) {
      classes.push_back({p});
    } else {
      it->push_back(p);
    }
  }
  std::stable_sort(classes.begin(), classes.end(), [&](const auto& a, const auto& b) {
    const bool pa = preferred(a[0]);
    const bool pb = preferred(b[0]);
    if (pa != pb) return pa;
    return a.size() > b.size();
  });
  return classes;
}

template <class Key>
std::vector<std::vector<int>> classes_of(int n, Key&& key) {
  return classes_of(n, key, [](int) { return true; });
}

const SignatureField* field_of(const RenderedSignature& call, const std::string& id) {
  for (const SignatureField& f : call.fields) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

std::string kind_and_purpose(const RenderedSignature& call) {
  return call.purpose.empty() ? call.kind : absl::StrCat(call.kind, " for ", call.purpose);
}

std::exception_ptr invalid(std::string message) { return std::make_exception_ptr(InvalidArgumentError(message)); }
std::exception_ptr precondition(std::string message) {
  return std::make_exception_ptr(FailedPreconditionError(message));
}

std::exception_ptr kind_disagreement(std::span<const RenderedSignature> calls, const Parties& parties,
                                     const std::vector<std::vector<int>>& classes) {
  const RenderedSignature& ref = calls[static_cast<std::size_t>(classes[0][0])];
  const std::string ref_kind = kind_and_purpose(ref);
  std::vector<std::string> parts;
  for (std::size_t c = 1; c < classes.size(); ++c) {
    const RenderedSignature& other = calls[static_cast<std::size_t>(classes[c][0])];
    if (other.kind == collective::kind_name(CollectiveKind::kReturn)) {
      parts.push_back(absl::StrCat(parties.name(classes[c]), " returned from the replica function while ",
                                   parties.name(classes[0]), classes[0].size() == 1 ? " waits in " : " wait in ",
                                   ref_kind, " (collective #", ref.sequence, ")"));
    } else {
      parts.push_back(absl::StrCat(parties.name(classes[c]), " called ", kind_and_purpose(other), " where ",
                                   parties.name(classes[0]), " called ", ref_kind, " (collective #", ref.sequence,
                                   ")"));
    }
  }
  return precondition(absl::StrCat(absl::StrJoin(parts, "; "), ". Every ", parties.noun,
                                   " must make the same collective calls in the same order."));
}

std::exception_ptr field_disagreement(std::span<const RenderedSignature> calls, const Parties& parties,
                                      const std::string& id) {
  const int n = static_cast<int>(calls.size());
  const auto field = [&](int p) { return field_of(calls[static_cast<std::size_t>(p)], id); };
  auto classes = classes_of(n, [&](int p) {
    const SignatureField* f = field(p);
    return f != nullptr ? f->key : std::string();
  });
  if (classes.size() == 1) return nullptr;
  const auto shown = [&](const std::vector<int>& c) {
    const SignatureField* f = field(c[0]);
    if (f != nullptr) return f->shown.empty() ? f->key : f->shown;
    // A call without the field: one the user made (no purpose), or one of fewer leaves.
    const RenderedSignature& call = calls[static_cast<std::size_t>(c[0])];
    return call.purpose.empty() ? absl::StrCat(call.kind, " directly") : std::string("nothing");
  };
  const SignatureField* ref = field(classes[0][0]);
  if (ref == nullptr) ref = field(classes[1][0]);
  // Parties that differ yet print alike (two variables of one name) are told apart by their key.
  bool alike = true;
  for (const auto& c : classes) alike &= shown(c) == shown(classes[0]);
  const auto text = [&](const std::vector<int>& c) {
    const SignatureField* f = field(c[0]);
    return alike && f != nullptr ? f->key : shown(c);
  };
  const std::string name = absl::StrCat(calls[static_cast<std::size_t>(classes[0][0])].name(), ref->where);
  std::vector<std::string> parts;
  switch (ref->kind) {
    case SignatureField::Kind::kPurpose: {
      for (std::size_t c = 1; c < classes.size(); ++c) {
        parts.push_back(absl::StrCat(parties.name(classes[c]), " called ", text(classes[c])));
      }
      const bool checkpoint = calls[0].kind == collective::kind_name(CollectiveKind::kCheckpoint);
      return invalid(absl::StrCat(name, ": ", parties.name(classes[0]), " called ", text(classes[0]), " where ",
                                  absl::StrJoin(parts, ", "), "; every ", parties.noun,
                                  checkpoint ? " must make the same checkpoint calls, of the same entries, in the same order"
                                             : " must make the same updates in the same order"));
    }
    case SignatureField::Kind::kMergeFunction: {
      std::vector<int> others;
      for (std::size_t c = 1; c < classes.size(); ++c) {
        others.insert(others.end(), classes[c].begin(), classes[c].end());
      }
      std::sort(others.begin(), others.end());
      return precondition(absl::StrCat(name, ": ", parties.name(others),
                                       " passed a merge_fn or arguments of other types than ", parties.name(classes[0]),
                                       "; every ", parties.noun, " must call merge_call with the same function"));
    }
    default: {
      for (std::size_t c = 1; c < classes.size(); ++c) {
        parts.push_back(absl::StrCat(parties.name(classes[c]), " passed ", text(classes[c])));
      }
      parts.push_back(absl::StrCat(parties.name(classes[0]), " passed ", text(classes[0])));
      return invalid(absl::StrCat(name, ": ", absl::StrJoin(parts, ", "),
                                  parties.value_hint != nullptr ? parties.value_hint : ref->hint));
    }
  }
}

void append(std::string& out, std::string_view text) {
  const std::uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(text);
}

// Reads what append wrote; InternalError if `bytes` ends early.
std::string_view take(std::string_view& bytes) {
  std::uint64_t n = 0;
  DISTRIBUTE_CHECK(bytes.size() >= sizeof n, InternalError, "a call signature from another worker is truncated");
  std::memcpy(&n, bytes.data(), sizeof n);
  bytes.remove_prefix(sizeof n);
  DISTRIBUTE_CHECK(bytes.size() >= n, InternalError, "a call signature from another worker is truncated");
  const std::string_view text = bytes.substr(0, n);
  bytes.remove_prefix(n);
  return text;
}

}  // namespace

std::uint64_t signature_digest(const CollectiveCall& call) {
  const collective::CollectiveOp& op = call.op;
  std::uint64_t h = mix(0x6a09e667f3bcc908, static_cast<std::uint64_t>(op.kind));
  if (op.kind == CollectiveKind::kReturn) return h;
  if (call.purpose != nullptr) h = mix(h, call.purpose->digest);
  switch (op.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter: h = mix(h, static_cast<std::uint64_t>(op.op)); break;
    case CollectiveKind::kReduceTo:
      h = mix(mix(h, static_cast<std::uint64_t>(op.op)), static_cast<std::uint64_t>(op.axis));
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGatherTo: h = mix(h, static_cast<std::uint64_t>(call_axis(op))); break;
    case CollectiveKind::kMergeCall: h = mix(h, call.merge_type_hash); break;
    case CollectiveKind::kReturn:
    case CollectiveKind::kBroadcastTo:
    case CollectiveKind::kCheckpoint: break;
  }
  h = mix(h, call.structure_hash);
  h = mix(h, call.leaf_digest);  // which counts the leaves too
  h = mix(h, static_cast<std::uint64_t>(op.options.implementation));
  h = mix(h, static_cast<std::uint64_t>(op.options.compression));
  return mix(h, static_cast<std::uint64_t>(op.options.bytes_per_pack));
}

RenderedSignature render_signature(const CollectiveCall& call) {
  using Kind = SignatureField::Kind;
  const collective::CollectiveOp& op = call.op;
  RenderedSignature out{collective::kind_name(op.kind), op.sequence, "", {}};
  if (op.kind == CollectiveKind::kReturn) return out;
  if (const CallPurpose* purpose = call.purpose; purpose != nullptr && op.kind == CollectiveKind::kCheckpoint) {
    // One operation on every entry: the digest tells apart lists that print alike.
    out.purpose = purpose_text(*purpose);
    out.fields.push_back({Kind::kPurpose, "operation", "", absl::StrCat(out.purpose, " (", hex(purpose->digest), ")"),
                          out.purpose, ""});
  } else if (purpose != nullptr) {
    out.purpose = purpose_text(*purpose);
    const std::size_t n = purpose->variables.size();
    for (std::size_t k = 0; k < n; ++k) {
      const VariableKey& v = purpose->variables[k];
      const std::string where = n > 1 ? absl::StrCat(" (leaf ", k, ")") : "";
      out.fields.push_back({Kind::kPurpose, absl::StrCat("variable", where), where,
                            absl::StrCat(variable_text(*purpose, v), " (variable #", v.number, ", id ", hex(v.id), ")"),
                            variable_text(*purpose, v), ""});
    }
  }
  switch (op.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      out.fields.push_back({Kind::kOperation, "op", "", absl::StrCat("reduce op ", reduce_op_name(op.op)), "", ""});
      break;
    case CollectiveKind::kReduceTo:
      out.fields.push_back({Kind::kOperation, "op", "", absl::StrCat("reduce op ", reduce_op_name(op.op)), "", ""});
      out.fields.push_back({Kind::kOperation, "axis", "",
                            op.axis < 0 ? std::string("axis=None") : absl::StrCat("axis=", op.axis), "", ""});
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGatherTo:
      out.fields.push_back({Kind::kOperation, "axis", "", absl::StrCat("axis=", call_axis(op)), "", ""});
      break;
    case CollectiveKind::kMergeCall:
      out.fields.push_back({Kind::kMergeFunction, "merge_fn", "", hex(call.merge_type_hash),
                            call.merge_type_info != nullptr ? type_name(*call.merge_type_info) : "", ""});
      break;
    case CollectiveKind::kReturn:
    case CollectiveKind::kBroadcastTo:
    case CollectiveKind::kCheckpoint: break;
  }
  if (call.describe_structure != nullptr) {
    out.fields.push_back({Kind::kStructure, "structure", "", call.describe_structure(call.value), "",
                          "; the nest structure must be the same on every replica"});
  }
  for (std::size_t leaf = 0; leaf < op.inputs.size(); ++leaf) {
    const BufferRef& in = op.inputs[leaf];
    const int axis = open_axis(op, *in.shape);
    std::vector<std::string> dims;
    for (int d = 0; d < in.shape->rank(); ++d) dims.push_back(d == axis ? "*" : absl::StrCat((*in.shape)[d]));
    std::string hint;
    if (op.kind == CollectiveKind::kAllReduce || op.kind == CollectiveKind::kReduceScatter) {
      hint = absl::StrCat("; ", collective::kind_name(op.kind), " needs the same dtype and shape on every replica");
    }
    if (op.kind == CollectiveKind::kAllGather) {
      hint = absl::StrCat("; all_gather needs the same dtype, rank and dimensions except axis ", axis);
    }
    const std::string where = op.inputs.size() > 1 ? absl::StrCat(" (leaf ", leaf, ")") : "";
    out.fields.push_back({Kind::kLeaf, absl::StrCat("leaf", where), where,
                          absl::StrCat(dtype_name(in.dtype), "[", absl::StrJoin(dims, ","), "]"),
                          absl::StrCat(dtype_name(in.dtype), in.shape->compact()), std::move(hint)});
  }
  if (op.kind != CollectiveKind::kReduceTo && op.kind != CollectiveKind::kGatherTo &&
      op.kind != CollectiveKind::kBroadcastTo && op.kind != CollectiveKind::kCheckpoint) {
    out.fields.push_back({Kind::kOptions, "options", "",
                          absl::StrCat("options {implementation=", implementation_name(op.options.implementation),
                                       ", bytes_per_pack=", op.options.bytes_per_pack,
                                       op.options.compression != Compression::kNone
                                           ? absl::StrCat(", compression=", compression_name(op.options.compression))
                                           : "",
                                       "}"),
                          "", ""});
  }
  return out;
}

std::string RenderedSignature::name() const { return absl::StrCat(kind, " #", sequence); }

std::string RenderedSignature::serialize() const {
  std::string out;
  append(out, kind);
  append(out, absl::StrCat(sequence));
  append(out, purpose);
  for (const SignatureField& f : fields) {
    append(out, std::string(1, static_cast<char>(f.kind)));
    append(out, f.id);
    append(out, f.where);
    append(out, f.key);
    append(out, f.shown);
    append(out, f.hint);
  }
  return out;
}

RenderedSignature RenderedSignature::deserialize(std::string_view bytes) {
  RenderedSignature out;
  out.kind = take(bytes);
  out.sequence = std::stoll(std::string(take(bytes)));
  out.purpose = take(bytes);
  while (!bytes.empty()) {
    SignatureField f;
    const std::string_view kind = take(bytes);
    DISTRIBUTE_CHECK(kind.size() == 1, InternalError, "a call signature from another worker is malformed");
    f.kind = static_cast<SignatureField::Kind>(kind[0]);
    f.id = take(bytes);
    f.where = take(bytes);
    f.key = take(bytes);
    f.shown = take(bytes);
    f.hint = take(bytes);
    out.fields.push_back(std::move(f));
  }
  return out;
}

std::exception_ptr find_disagreement(std::span<const RenderedSignature> calls, const Parties& parties) {
  const int n = static_cast<int>(calls.size());
  const std::string returned = collective::kind_name(CollectiveKind::kReturn);
  auto kinds = classes_of(
      n, [&](int p) { return calls[static_cast<std::size_t>(p)].kind; },
      [&](int p) { return calls[static_cast<std::size_t>(p)].kind != returned; });
  if (kinds.size() > 1) return kind_disagreement(calls, parties, kinds);

  auto sequences = classes_of(n, [&](int p) { return calls[static_cast<std::size_t>(p)].sequence; });
  if (sequences.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& c : sequences) {
      parts.push_back(absl::StrCat(parties.name(c), " called ", calls[static_cast<std::size_t>(c[0])].name()));
    }
    return precondition(absl::StrCat(absl::StrJoin(parts, ", "), " (", calls[0].kind,
                                     "s in a different order); every ", parties.noun, " must make the same calls"));
  }

  // Fields in the order the first party has them, then any only others have.
  std::vector<std::string> ids;
  for (const RenderedSignature& call : calls) {
    for (const SignatureField& f : call.fields) {
      if (std::find(ids.begin(), ids.end(), f.id) == ids.end()) ids.push_back(f.id);
    }
  }
  for (const std::string& id : ids) {
    if (std::exception_ptr error = field_disagreement(calls, parties, id)) return error;
  }
  return nullptr;
}

std::exception_ptr compare_calls(std::span<CollectiveCall* const> calls, int first_id) {
  const std::uint64_t first = calls[0]->signature;
  bool same = true;
  for (const CollectiveCall* call : calls) same &= call->signature == first;
  if (same) return nullptr;
  // Rendered only on a difference: the matching path allocates nothing.
  std::vector<RenderedSignature> rendered;
  rendered.reserve(calls.size());
  for (const CollectiveCall* call : calls) rendered.push_back(render_signature(*call));
  const auto name = [first_id](std::vector<int> replicas) {
    for (int& r : replicas) r += first_id;
    return collective::replicas_text(replicas);
  };
  if (std::exception_ptr error = find_disagreement(rendered, Parties{name, "replica"})) return error;
  return invalid(
      absl::StrCat(call_name(*calls[0]), ": the replicas' calls differ in a way their descriptions do not show"));
}

std::string call_name(const CollectiveCall& call) { return collective::op_name(call.op); }

CallBallot::CallBallot(Status what, const CollectiveCall& call, std::exception_ptr failure, int failing_replica)
    : call_(call) {
  status = what;
  kind = static_cast<std::uint16_t>(call.op.kind);
  sequence = call.op.sequence;
  signature = call.signature;
  timeout = call.op.options.timeout;
  error = std::move(failure);
  failed_replica = failing_replica;
}

std::exception_ptr CallBallot::disagreement(
    const std::vector<std::string>& described,
    absl::FunctionRef<std::string(const std::vector<int>&)> name_workers) const {
  std::vector<RenderedSignature> calls;
  calls.reserve(described.size());
  for (const std::string& d : described) calls.push_back(RenderedSignature::deserialize(d));
  return find_disagreement(calls, Parties{name_workers, "worker", "; every worker's replicas must pass the same kind of value"});
}

}  // namespace distribute::detail
