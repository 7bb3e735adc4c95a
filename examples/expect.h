// The check the seed-example programs share: each compares what it printed with the value the
// reference documents give and reports a mismatch on stderr; main's exit status tells ctest.
#pragma once

#include <iostream>

namespace examples {

inline int failures = 0;

// Records a value that differs from the documented one.
inline void expect(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "MISMATCH: " << what << '\n';
    ++failures;
  }
}

}  // namespace examples
