// What the files of errors_test share: docs/errors.md's rows as the tests expect them, and the check
// of one row.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"

// Rows that need a GPU skip, with the reason, where none is visible.
#define SKIP_UNLESS_GPU()                                                                      \
  if (num_physical_gpus() == 0) GTEST_SKIP() << "no GPU visible: " << gpu_unavailable_reason()

namespace distribute::testing {

struct Row {
  std::string id;
  std::string type;
  std::vector<std::string> key_words;
  bool operator==(const Row&) const = default;
};

// What docs/errors.md says of each row: the error type and the message's key words.
const std::vector<Row>& expected_rows();

const Row* find_row(std::string_view id);

// Runs fn under a watchdog and checks that it throws exactly E with row `id`'s key words and the
// `extra` ones (what a particular form of the situation adds, such as the method's name).
template <class E, class Fn>
std::string expect_row(std::string_view id, Fn&& fn, const std::vector<std::string>& extra = {}) {
  const Row* row = find_row(id);
  if (row == nullptr) {
    ADD_FAILURE() << id << " is not a row of expected_rows()";
    return "";
  }
  EXPECT_EQ(row->type, type_name<E>()) << id << ": the test expects another type than the row lists";
  std::vector<std::string> words = row->key_words;
  words.insert(words.end(), extra.begin(), extra.end());
  constexpr std::chrono::milliseconds kHangLimit{20000};
  Watchdog watchdog(kHangLimit, std::string(id));
  return expect_error<E>(fn, words);
}

// Each replica of a run gets zeros of its own shape / dtype: replica r gets shapes[r].
inline PerReplica<Tensor> per_replica_zeros(std::vector<Shape> shapes, std::vector<DType> dtypes = {}) {
  std::vector<Tensor> values;
  for (std::size_t r = 0; r < shapes.size(); ++r) {
    values.push_back(zeros(shapes[r], dtypes.empty() ? DType::kFloat32 : dtypes[r]));
  }
  return PerReplica<Tensor>(std::move(values));
}

}  // namespace distribute::testing
