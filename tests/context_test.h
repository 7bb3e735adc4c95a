// What the files of context_test share.
#pragma once

#include <gtest/gtest.h>

#include "distribute/distribute.h"

namespace distribute::testing {

// The thread is in the default strategy's replica context, as with no setup at all.
inline void expect_default_context() {
  ReplicaContext* ctx = get_replica_context();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->replica_id_in_sync_group(), 0);
  EXPECT_EQ(ctx->num_replicas_in_sync(), 1);
  EXPECT_EQ(&ctx->strategy(), &get_strategy());
  EXPECT_EQ(get_cross_replica_context(), nullptr);
  EXPECT_FALSE(in_cross_replica_context());
  EXPECT_FALSE(has_strategy());
  EXPECT_NE(dynamic_cast<DefaultStrategy*>(&get_strategy()), nullptr);
}

}  // namespace distribute::testing
