// The per-thread context stack, and the default device it implies for the thread.
#include "distribute/replica/internal/context_stack.h"

#include <algorithm>
#include <vector>

#include "distribute/device/device.h"
#include "distribute/replica/replica_context.h"

namespace distribute::detail {
namespace {

struct Entry {
  ThreadMode mode;
  const void* owner;
};

thread_local std::vector<Entry> t_stack;
constexpr ThreadMode kDefaultMode{};

// Tensors made without a device go to the replica's device inside a replica's context.
void update_default_device() {
  const ReplicaContext* context = current_mode().replica_context;
  set_default_device(context != nullptr ? &context->device() : nullptr);
}

}  // namespace

const ThreadMode& current_mode() { return t_stack.empty() ? kDefaultMode : t_stack.back().mode; }

ScopedMode::ScopedMode(const ThreadMode& mode) { push_mode(mode, this); }
ScopedMode::~ScopedMode() { pop_mode(this); }

void push_mode(const ThreadMode& mode, const void* owner) {
  t_stack.push_back({mode, owner});
  update_default_device();
}

void pop_mode(const void* owner) noexcept {
  auto it = std::find_if(t_stack.rbegin(), t_stack.rend(), [&](const Entry& e) { return e.owner == owner; });
  if (it != t_stack.rend()) t_stack.erase(std::next(it).base());
  update_default_device();
}

void forget_strategy(const Strategy* strategy) noexcept {
  std::erase_if(t_stack, [&](const Entry& e) { return e.mode.strategy == strategy; });
  update_default_device();
}

}  // namespace distribute::detail
