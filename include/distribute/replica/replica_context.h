// ReplicaContext: what the fn passed to Strategy::run can do with the other replicas.
//
// Threading contract. Each replica's context is used only from that replica's thread, inside run
// (calling it from another thread is a FailedPreconditionError). all_reduce, all_gather and
// merge_call are collective: every replica must call them, in the same order, with the same
// structure, dtypes and shapes (all_gather: all dimensions but `axis`). A difference, a replica
// returning early or raising, or a timeout ends the collective on every replica with an error
// naming the replicas; no replica is left waiting. Results are complete when the call returns.
//
//   auto sum = get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f));
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "distribute/collective/communication_options.h"
#include "distribute/collective/shard.h"
#include "distribute/device/reduce_op.h"
#include "distribute/replica/collective_handle.h"
#include "distribute/replica/internal/collective_args.h"
#include "distribute/replica/internal/context_stack.h"
#include "distribute/values/distributed_values.h"

namespace distribute {

namespace detail {

class ReplicaGroup;  // src/replica/replica_group.h

// What a replica receives from merge_call's result R: PerReplica and Mirrored values are replaced
// by the replica's own component, inside tuples, pairs, vectors and maps too.
template <class R>
struct Unwrapped {
  using type = R;
  static R get(const R& r, int) { return r; }
};
template <class T>
struct Unwrapped<PerReplica<T>> {
  using type = T;
  static T get(const PerReplica<T>& r, int replica) { return r[replica]; }
};
template <class T>
struct Unwrapped<Mirrored<T>> {
  using type = T;
  static T get(const Mirrored<T>& r, int replica) { return r[replica]; }
};
template <class... Ts>
struct Unwrapped<std::tuple<Ts...>> {
  using type = std::tuple<typename Unwrapped<Ts>::type...>;
  static type get(const std::tuple<Ts...>& r, int replica) {
    return std::apply([&](const auto&... e) { return type{Unwrapped<std::decay_t<decltype(e)>>::get(e, replica)...}; }, r);
  }
};
template <class A, class B>
struct Unwrapped<std::pair<A, B>> {
  using type = std::pair<typename Unwrapped<A>::type, typename Unwrapped<B>::type>;
  static type get(const std::pair<A, B>& r, int replica) {
    return {Unwrapped<A>::get(r.first, replica), Unwrapped<B>::get(r.second, replica)};
  }
};
template <class T>
struct Unwrapped<std::vector<T>> {
  using type = std::vector<typename Unwrapped<T>::type>;
  static type get(const std::vector<T>& r, int replica) {
    type out;
    out.reserve(r.size());
    for (const T& e : r) out.push_back(Unwrapped<T>::get(e, replica));
    return out;
  }
};
template <class K, class T>
struct Unwrapped<std::map<K, T>> {
  using type = std::map<K, typename Unwrapped<T>::type>;
  static type get(const std::map<K, T>& r, int replica) {
    type out;
    for (const auto& [k, v] : r) out.emplace_hint(out.end(), k, Unwrapped<T>::get(v, replica));
    return out;
  }
};

// merge_fn's type and its arguments' types, named in a type whose name says them all.
template <class... T>
struct TypeList {};
// fixed_hash of that name: the same in every process running the same program, so that workers
// compare merge_fns too. Made once per instantiation.
template <class... T>
std::uint64_t type_list_hash() {
  static const std::uint64_t hash = fixed_hash(typeid(TypeList<T...>).name());
  return hash;
}

// The purpose the current thread's next collective is issued for, and by which context (see
// ScopedCallPurpose). A replica's collectives run on its own thread, so the thread tells whose.
struct IssuedPurpose {
  const ReplicaContext* context = nullptr;
  const CallPurpose* purpose = nullptr;
};
inline thread_local IssuedPurpose issued_purpose;

// Marks the collective or merge_call that `context`'s replica makes while it lives as issued for
// `purpose` (see CallPurpose): how the library's variable updates and optimizers name their
// variables in the call's signature. Made around one collective, on the replica's thread.
class ScopedCallPurpose {
 public:
  ScopedCallPurpose(const ReplicaContext& context, const CallPurpose& purpose) : saved_(issued_purpose) {
    issued_purpose = {&context, &purpose};
  }
  ~ScopedCallPurpose() { issued_purpose = saved_; }
  ScopedCallPurpose(const ScopedCallPurpose&) = delete;
  ScopedCallPurpose& operator=(const ScopedCallPurpose&) = delete;

 private:
  IssuedPurpose saved_;
};

}  // namespace detail

class ReplicaContext {
 public:
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  int replica_id_in_sync_group() const { return replica_id_; }
  int num_replicas_in_sync() const { return num_replicas_; }
  // This replica's index among its worker's replicas (replica_id_in_sync_group() is global).
  int local_replica_id() const { return local_replica_id_; }
  Strategy& strategy() const { return *strategy_; }
  // The device this replica runs on; collective results are placed there.
  const Device& device() const { return device_; }

  // Reduces `value` (a Tensor, a scalar or a nest of them) across replicas; every replica gets
  // the result, with the structure of `value`. A nest is reduced in one collective.
  template <class V>
  V all_reduce(ReduceOp op, const V& value, const CommunicationOptions& options = {});
  template <class V>
  V all_reduce(std::string_view op, const V& value, const CommunicationOptions& options = {}) {
    return all_reduce(parse_reduce_op(op), value, options);
  }

  // Reduces in place: afterwards every replica's `tensors` (a Tensor or a nest of Tensors, which
  // may view memory of the user's, such as Eigen objects through Tensor::view) hold the result.
  // Nothing is allocated for the result. InvalidArgumentError for a scalar leaf.
  template <nest::Nest V>
  void all_reduce_in_place(ReduceOp op, V& tensors, const CommunicationOptions& options = {});
  // The same for Eigen matrices or arrays (and tensors) given one by one, in one collective:
  //   ctx->all_reduce_in_place(ReduceOp::kMean, grad_w1, grad_b1, grad_w2, grad_b2);
  template <class... Ts>
    requires((EigenDense<Ts> || std::same_as<Ts, Tensor>) && ...) && (sizeof...(Ts) > 1 || (EigenDense<Ts> && ...))
  void all_reduce_in_place(ReduceOp op, Ts&... values) {
    std::vector<Tensor> tensors{as_tensor(values)...};
    all_reduce_in_place(op, tensors);
  }

  // Concatenates every replica's `value` along `axis` (per-replica sizes along axis may differ).
  // Every leaf needs rank >= 1; negative axes count from the end.
  template <class V>
  V all_gather(const V& value, int axis, const CommunicationOptions& options = {});

  // Reduces `value` (a Tensor or a nest of Tensors) across replicas and gives each replica its
  // shard of the result: every leaf is reduced as all_reduce would, flattened, and cut as
  // shard_of (distribute/collective/shard.h) says, and replica r gets shard r as a rank-1 Tensor
  // (of 0 elements where a leaf has fewer elements than there are replicas). The result has the
  // structure of `value`. The leaves need the same dtype and shape on every replica;
  // InvalidArgumentError for a scalar leaf (pass a Tensor).
  template <class V>
  V reduce_scatter(ReduceOp op, const V& value, const CommunicationOptions& options = {});
  template <class V>
  V reduce_scatter(std::string_view op, const V& value, const CommunicationOptions& options = {}) {
    return reduce_scatter(parse_reduce_op(op), value, options);
  }
  // This replica's shard of a leaf of `count` elements.
  Shard shard(std::int64_t count) const { return shard_of(count, num_replicas_, replica_id_); }
  // The way back from reduce_scatter, in place (how sharded optimizer state, ZeRO stage 1, gives
  // every replica the updated variables): each of `wholes` is this replica's copy of a tensor,
  // whose shard(num_elements()) of the flattened elements holds this replica's part; afterwards
  // every whole holds every replica's part. One collective with the checks and errors of
  // all_gather of the shards along axis 0, and nothing allocated: each backend writes the other
  // replicas' parts straight into the wholes and leaves this replica's part alone. Every replica
  // passes wholes of the same dtypes and element counts, on its device.
  void all_gather_shards_in_place(std::span<const Tensor> wholes, const CommunicationOptions& options = {});

  // all_reduce, reduce_scatter and all_gather without waiting: each checks its arguments and
  // returns a CollectiveHandle at once, and the collective runs on a thread of this replica's
  // own while the replica goes on (every collective of a replica, blocking or not, still meets
  // the others' in issue order: a blocking one waits for those issued before it). Its signature
  // is compared with the other replicas' as the blocking call's is, and its errors, timeout and
  // release when another replica fails are the blocking call's, thrown by wait(). The value is
  // copied (tensors share their storage): do not write a tensor the collective reads until
  // wait() returns. On a GPU replica the collective runs at issue for now, and its handle is
  // ready at once.
  template <class V>
  CollectiveHandle<V> all_reduce_async(ReduceOp op, const V& value, const CommunicationOptions& options = {});
  template <class V>
  CollectiveHandle<V> reduce_scatter_async(ReduceOp op, const V& value, const CommunicationOptions& options = {});
  template <class V>
  CollectiveHandle<V> all_gather_async(const V& value, int axis, const CommunicationOptions& options = {});

  // Pauses every replica, runs merge_fn(strategy, PerReplica<Args>...) once in cross-replica
  // context and gives its result to every replica, each PerReplica/Mirrored in it unpacked to the
  // replica's own component.
  template <class Fn, class... Args>
  auto merge_call(Fn&& merge_fn, Args&&... args);

 protected:
  // Made by strategies only (detail::StrategyReplicaContext, src/replica/): `group` is null for a
  // single replica (collectives are then local copies). replica_id and num_replicas are global;
  // local_replica_id is the replica's index in its worker (-1: replica_id, for a strategy of one
  // worker). The default context is the default strategy's, usable on any thread outside every
  // scope.
  ReplicaContext(Strategy& strategy, int replica_id, int num_replicas, detail::ReplicaGroup* group, Device device,
                 int run_depth, int local_replica_id = -1, bool default_context = false);
  ~ReplicaContext() = default;

 private:
  void require_current(const char* method) const;
  static const Tensor& as_tensor(const Tensor& t) { return t; }
  template <EigenDense E>
  static Tensor as_tensor(E& eigen) {
    return Tensor::view(eigen);
  }
  // The *_async calls: `prepare` readies the CollectiveArgs made of the handle's copy of `value`
  // (on this thread, at issue); `run` runs the collective, on the lane.
  template <class V, class Prepare>
  CollectiveHandle<V> issue(const char* method, collective::CollectiveKind kind, const V& value,
                            const CommunicationOptions& options, Prepare&& prepare,
                            void (ReplicaContext::*run)(detail::CollectiveArgs&));
  // Hands `job` to this replica's async lane, or runs it now (one replica, a GPU replica).
  void issue_async(std::shared_ptr<detail::AsyncCollective> job);
  void run_all_reduce(detail::CollectiveArgs& args);
  void run_all_gather(detail::CollectiveArgs& args);
  void run_reduce_scatter(detail::CollectiveArgs& args);
  std::shared_ptr<void> run_merge_call(detail::CollectiveCall& call);
  detail::ThreadMode merge_mode() const;
  // What the collective being made is issued for (null: the user's own call); see
  // ScopedCallPurpose, whose scope holds one collective.
  const detail::CallPurpose* purpose() const {
    return detail::issued_purpose.context == this ? detail::issued_purpose.purpose : nullptr;
  }

  template <class Fn, class... Args>
  struct MergeFrame {
    const ReplicaContext* context;
    Fn* fn;
    std::tuple<const std::decay_t<Args>*...> args;
  };

  Strategy* strategy_;
  int replica_id_;
  int local_replica_id_;  // the replica's index among its worker's, and its rank in the group
  int num_replicas_;
  detail::ReplicaGroup* group_;
  Device device_;
  int run_depth_;
  bool default_context_;
};

// ---------------------------------------------------------------------------------------------
// Implementation of the templates.

template <class V>
V ReplicaContext::all_reduce(ReduceOp op, const V& value, const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "all_reduce takes a Tensor, an arithmetic scalar or a nest of them");
  require_current("all_reduce");
  detail::CollectiveArgs args(value, collective::CollectiveKind::kAllReduce, device_);
  args.call().op.op = op;
  args.call().op.options = options;
  args.call().purpose = purpose();
  args.allocate_outputs_like_inputs();
  if (!args.outputs_are_views()) {
    run_all_reduce(args);
    return args.rebuild(value);
  }
  // The result holds views of the output block, not copies of the data, so it is made while this
  // replica waits for the others at the rendezvous: a gradient list's hundred tensors then fill
  // the wait instead of following the data phase. A failure to make it is thrown only once the
  // collective is over, so that the other replicas are not left waiting for this one.
  std::optional<V> result;
  std::exception_ptr error;
  auto make_result = [&]() noexcept {
    try {
      result.emplace(args.rebuild(value));
    } catch (...) {
      error = std::current_exception();
    }
  };
  args.call().while_waiting.emplace(make_result);
  run_all_reduce(args);
  if (!result && !error) make_result();  // one replica: no rendezvous
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

template <nest::Nest V>
void ReplicaContext::all_reduce_in_place(ReduceOp op, V& tensors, const CommunicationOptions& options) {
  require_current("all_reduce_in_place");
  detail::CollectiveArgs args(tensors, collective::CollectiveKind::kAllReduce, device_);
  args.call().op.op = op;
  args.call().op.options = options;
  args.call().purpose = purpose();
  args.use_inputs_as_outputs();
  run_all_reduce(args);
}

template <class V>
V ReplicaContext::all_gather(const V& value, int axis, const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "all_gather takes a Tensor or a nest of Tensors");
  require_current("all_gather");
  detail::CollectiveArgs args(value, collective::CollectiveKind::kAllGather, device_);
  args.call().op.options = options;
  args.call().purpose = purpose();
  args.prepare_gather(axis);
  run_all_gather(args);
  return args.rebuild(value);
}

template <class V>
V ReplicaContext::reduce_scatter(ReduceOp op, const V& value, const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "reduce_scatter takes a Tensor or a nest of Tensors");
  require_current("reduce_scatter");
  detail::CollectiveArgs args(value, collective::CollectiveKind::kReduceScatter, device_);
  args.call().op.op = op;
  args.call().op.options = options;
  args.call().purpose = purpose();
  args.allocate_shard_outputs(replica_id_, num_replicas_);
  run_reduce_scatter(args);
  return args.rebuild(value);
}

template <class V, class Prepare>
CollectiveHandle<V> ReplicaContext::issue(const char* method, collective::CollectiveKind kind, const V& value,
                                          const CommunicationOptions& options, Prepare&& prepare,
                                          void (ReplicaContext::*run)(detail::CollectiveArgs&)) {
  require_current(method);
  auto state = std::make_shared<detail::AsyncState<V>>(value);
  auto args = std::make_unique<detail::CollectiveArgs>(state->value, kind, device_);
  args->call().op.options = options;
  if (const detail::CallPurpose* issued_for = purpose()) {
    state->purpose_keys.assign(issued_for->variables.begin(), issued_for->variables.end());
    args->call().purpose = &state->purpose.emplace(issued_for->action, state->purpose_keys);
  }
  prepare(*args);
  state->job.set_call(&args->call());
  state->job.set_work([this, run, s = state.get(), args = std::move(args)] {
    (this->*run)(*args);
    s->result.emplace(args->rebuild(s->value));
  });
  issue_async(std::shared_ptr<detail::AsyncCollective>(state, &state->job));
  return CollectiveHandle<V>(std::move(state));
}

template <class V>
CollectiveHandle<V> ReplicaContext::all_reduce_async(ReduceOp op, const V& value, const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "all_reduce_async takes a Tensor, an arithmetic scalar or a nest of them");
  return issue(
      "all_reduce_async", collective::CollectiveKind::kAllReduce, value, options,
      [op](detail::CollectiveArgs& args) {
        args.call().op.op = op;
        args.allocate_outputs_like_inputs();
      },
      &ReplicaContext::run_all_reduce);
}

template <class V>
CollectiveHandle<V> ReplicaContext::reduce_scatter_async(ReduceOp op, const V& value,
                                                         const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "reduce_scatter_async takes a Tensor or a nest of Tensors");
  return issue(
      "reduce_scatter_async", collective::CollectiveKind::kReduceScatter, value, options,
      [this, op](detail::CollectiveArgs& args) {
        args.call().op.op = op;
        args.allocate_shard_outputs(replica_id_, num_replicas_);
      },
      &ReplicaContext::run_reduce_scatter);
}

template <class V>
CollectiveHandle<V> ReplicaContext::all_gather_async(const V& value, int axis, const CommunicationOptions& options) {
  static_assert(nest::Nest<V>, "all_gather_async takes a Tensor or a nest of Tensors");
  return issue(
      "all_gather_async", collective::CollectiveKind::kAllGather, value, options,
      [axis](detail::CollectiveArgs& args) { args.prepare_gather(axis); }, &ReplicaContext::run_all_gather);
}

template <class Fn, class... Args>
auto ReplicaContext::merge_call(Fn&& merge_fn, Args&&... args) {
  using F = std::remove_reference_t<Fn>;
  using R = std::invoke_result_t<F&, Strategy&, PerReplica<std::decay_t<Args>>...>;
  require_current("merge_call");

  using Frame = MergeFrame<F, Args...>;
  Frame frame{this, &merge_fn, {&args...}};
  auto run = [](std::span<detail::CollectiveCall* const> calls) -> std::shared_ptr<void> {
    const Frame& first = *static_cast<const Frame*>(calls[0]->frame);
    auto collect = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      using A = std::decay_t<std::tuple_element_t<I, std::tuple<Args...>>>;
      std::vector<A> values;
      values.reserve(calls.size());
      for (detail::CollectiveCall* call : calls) {
        values.push_back(*std::get<I>(static_cast<const Frame*>(call->frame)->args));
      }
      return PerReplica<A>(std::move(values));
    };
    detail::ScopedMode mode(first.context->merge_mode());
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> std::shared_ptr<void> {
      if constexpr (std::is_void_v<R>) {
        std::invoke(*first.fn, first.context->strategy(), collect(std::integral_constant<std::size_t, I>{})...);
        return nullptr;
      } else {
        return std::make_shared<std::decay_t<R>>(
            std::invoke(*first.fn, first.context->strategy(), collect(std::integral_constant<std::size_t, I>{})...));
      }
    }(std::index_sequence_for<Args...>{});
  };

  detail::CollectiveCall call;
  call.merge_type_hash = detail::type_list_hash<F, std::decay_t<Args>...>();
  call.merge_type_info = &typeid(detail::TypeList<F, std::decay_t<Args>...>);
  call.purpose = purpose();
  call.frame = &frame;
  call.run_merge = run;
  std::shared_ptr<void> result = run_merge_call(call);
  if constexpr (!std::is_void_v<R>) {
    return detail::Unwrapped<std::decay_t<R>>::get(*static_cast<const std::decay_t<R>*>(result.get()), local_replica_id_);
  } else {
    (void)result;
    return;
  }
}

}  // namespace distribute
