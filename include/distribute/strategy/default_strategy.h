// The default strategy: what get_strategy() returns when no strategy is in scope. One replica
// (id 0) on the calling thread, on CPU:0; its collectives are copies and merge_call calls
// merge_fn directly in cross-replica context, so code written for a strategy also runs without one.
#pragma once

#include "distribute/strategy/strategy.h"

namespace distribute {

class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy();
  std::string name() const override { return "DefaultStrategy"; }
};

}  // namespace distribute
