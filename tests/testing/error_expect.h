// Checking errors in tests: expect_error<E>(fn, key_words) runs fn and fails the test unless it
// throws exactly E (not a subclass, not a sibling) whose what() contains every key word; the same
// for an exception already caught. Also the "replica 0" / "replicas 0, 2" texts that the library's
// messages use to name replicas, and exceptions of a user's own for replicas to throw.
#pragma once

#include <cxxabi.h>
#include <gtest/gtest.h>

#include <concepts>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "absl/strings/str_join.h"

namespace distribute::testing {

// "distribute::InvalidArgumentError" -> "InvalidArgumentError"; other types keep their full name.
inline std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 ? demangled.get() : type.name();
  constexpr std::string_view kPrefix = "distribute::";
  if (name.starts_with(kPrefix)) name.erase(0, kPrefix.size());
  return name;
}

template <class E>
std::string type_name() {
  return type_name(typeid(E));
}

// Runs fn; returns what() of the exception it threw after checking its exact type and key words.
// Returns "" (and records a failure) when fn throws nothing or the wrong type.
template <class E, class Fn>
  requires std::invocable<Fn&>
std::string expect_error(Fn&& fn, const std::vector<std::string>& key_words) {
  try {
    fn();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (typeid(e) != typeid(E)) {
      ADD_FAILURE() << "expected " << type_name<E>() << " but got " << type_name(typeid(e)) << ": " << what;
      return "";
    }
    for (const std::string& word : key_words) {
      EXPECT_NE(what.find(word), std::string::npos)
          << type_name<E>() << " message lacks \"" << word << "\"; the message is:\n  " << what;
    }
    return what;
  } catch (...) {
    ADD_FAILURE() << "expected " << type_name<E>() << " but got an exception not derived from std::exception";
    return "";
  }
  ADD_FAILURE() << "expected " << type_name<E>() << " but nothing was thrown";
  return "";
}

// As above, for an exception caught earlier (on a replica's thread, say); a null `error` fails too.
template <class E>
std::string expect_error(const std::exception_ptr& error, const std::vector<std::string>& key_words) {
  if (!error) {
    ADD_FAILURE() << "expected " << type_name<E>() << " but nothing was thrown";
    return "";
  }
  return expect_error<E>([&] { std::rethrow_exception(error); }, key_words);
}

// Calls fn `calls` times and checks that every call throws E (of any type, derived from
// std::exception or not), handing each to check(e): an error that must stay once it happened.
template <class E, class Fn, class Check>
void expect_thrown_every_time(int calls, Fn&& fn, Check&& check) {
  for (int call = 0; call < calls; ++call) {
    try {
      fn();
      ADD_FAILURE() << "call " << call << ": expected " << type_name<E>() << " but nothing was thrown";
    } catch (const E& e) {
      check(e);
    }
  }
}

// As the library names a group of replicas in messages: "replica 1", "replicas 0, 2, 3".
inline std::string replicas_text(const std::vector<int>& replicas) {
  return (replicas.size() == 1 ? "replica " : "replicas ") + absl::StrJoin(replicas, ", ");
}

// The replicas 0..n-1 without those in `except`, in order.
inline std::vector<int> replicas_except(int n, std::initializer_list<int> except) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    bool skip = false;
    for (int e : except) skip |= e == r;
    if (!skip) out.push_back(r);
  }
  return out;
}

// A user's exception, not a distribute::Error, carrying which replica threw it.
struct MyError : std::runtime_error {
  MyError(int replica_id, const std::string& what) : std::runtime_error(what), replica(replica_id) {}
  int replica;
};

// A user's exception that is not even a std::exception.
struct NotStd {
  int code;
};

}  // namespace distribute::testing
