// The elastic job's generations, agreed through the rendezvous store's write-once keys.
#include "gloo/membership.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/host_name.h"
#include "base/wait.h"
#include "cluster/gloo/store.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

using cluster::gloo_backend::store_claim;
using cluster::gloo_backend::store_holds;
using cluster::gloo_backend::store_read;

constexpr auto kPoll = std::chrono::milliseconds(5);

// What a worker writes in the slot it claims.
struct Claim {
  std::string token;
  std::string host;
  int previous_generation = -1;
  int previous_id = -1;
  int initial_rank = -1;
  // The workers of the previous generation this one gave up waiting for; empty when it did not
  // say (it left for another reason).
  std::vector<int> missed;
};

std::vector<char> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

int to_int(const std::string& text) {
  int value = -1;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string encode(const Claim& c) {
  return absl::StrCat(c.token, "\n", c.host, "\n", c.previous_generation, "\n", c.previous_id, "\n", c.initial_rank,
                      "\n", absl::StrJoin(c.missed, ","));
}

Claim decode_claim(const std::vector<char>& bytes) {
  const std::vector<std::string> f = absl::StrSplit(std::string(bytes.begin(), bytes.end()), '\n');
  DISTRIBUTE_CHECK(f.size() == 6, InternalError, "elastic membership: a malformed claim in the rendezvous store");
  Claim claim{f[0], f[1], to_int(f[2]), to_int(f[3]), to_int(f[4]), {}};
  for (absl::string_view id : absl::StrSplit(f[5], ',', absl::SkipEmpty())) claim.missed.push_back(to_int(std::string(id)));
  return claim;
}

// "members": the generation its survivors come from, then a line per worker, "token<TAB>host<TAB>
// previous id". Empty for a generation closed with nobody (every worker gave up on it).
std::string encode(int base, const std::vector<ElasticMember>& members) {
  std::vector<std::string> lines{absl::StrCat(base)};
  for (const ElasticMember& m : members) lines.push_back(absl::StrCat(m.token, "\t", m.host, "\t", m.previous_id));
  return absl::StrJoin(lines, "\n");
}

struct Members {
  int base = -1;
  std::vector<ElasticMember> list;
};

Members decode_members(const std::vector<char>& bytes) {
  Members members;
  if (bytes.empty()) return members;  // closed with nobody
  const std::string text(bytes.begin(), bytes.end());
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  members.base = to_int(lines[0]);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = absl::StrSplit(lines[i], '\t');
    DISTRIBUTE_CHECK(f.size() == 3, InternalError, "elastic membership: a malformed member list in the store");
    members.list.push_back({f[0], f[1], to_int(f[2])});
  }
  return members;
}

std::string make_token(const std::string& host) {
  std::random_device random;
  return absl::StrCat(host, "/", ::getpid(), "/", (std::uint64_t{random()} << 32) | random());
}

// Runs `step`, a use of the store to `what`: the store's errors (a server gone, a directory removed)
// become UnavailableError.
template <class Step>
auto with_store(const std::string& what, Step&& step) {
  try {
    return step();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // Gloo's, or hiredis's through it
    throw UnavailableError(absl::StrCat("elastic membership: the rendezvous store failed when this worker tried to ",
                                        what, ": ", e.what()));
  }
}

}  // namespace

ElasticMembership::ElasticMembership(std::shared_ptr<::gloo::rendezvous::Store> store,
                                     ElasticMembershipOptions options)
    : store_(std::move(store)), options_(std::move(options)), host_(host_name()) {
  token_ = make_token(host_);
}

std::string ElasticMembership::key(int generation, const std::string& name) const {
  return absl::StrCat(options_.prefix, "/g", generation, "/", name);
}

ElasticGeneration ElasticMembership::join() {
  return with_store("join the job", [&] {
    int latest = -1;
    while (store_holds(*store_, key(latest + 1, "members"))) ++latest;
    return enter(latest + 1, -1, {});
  });
}

ElasticGeneration ElasticMembership::next(const ElasticGeneration& current, const std::vector<int>& missed) {
  return with_store(absl::StrCat("form generation ", current.number + 1),
                    [&] { return enter(current.number + 1, current.worker_id, missed); });
}

bool ElasticMembership::newcomer_waiting(const ElasticGeneration& current) {
  if (options_.max_workers > 0 && current.num_workers() >= options_.max_workers) return false;
  return with_store("look for workers waiting to join", [&] {
    // Past generations a newcomer gave up on (closed with nobody) to the one it would come to now.
    int next = current.number + 1;
    while (store_holds(*store_, key(next, "members"))) ++next;
    return store_holds(*store_, key(next, "slot-0"));
  });
}

ElasticGeneration ElasticMembership::enter(int number, int previous_id, const std::vector<int>& missed) {
  const Deadline deadline = Clock::now() + options_.timeout;
  const int previous_generation = number - 1;
  for (;; ++number) {
    if (store_holds(*store_, key(number, "members"))) continue;  // closed before this worker came
    const Claim mine{token_, host_, previous_id >= 0 ? previous_generation : -1, previous_id,
                     number == 0 ? options_.initial_rank : -1, previous_id >= 0 ? missed : std::vector<int>{}};
    int slot = 0;
    while (!store_claim(*store_, key(number, absl::StrCat("slot-", slot)), bytes_of(encode(mine)))) ++slot;
    close(number, deadline);
    const std::optional<std::vector<char>> members = store_read(*store_, key(number, "members"));
    DISTRIBUTE_CHECK(members.has_value(), InternalError, "elastic membership: generation ", number,
                     " was closed, but its member list is not in the rendezvous store");
    Members decoded = decode_members(*members);
    ElasticGeneration generation{number, std::move(decoded.list), -1, decoded.base};
    for (std::size_t w = 0; w < generation.members.size(); ++w) {
      if (generation.members[w].token == token_) generation.worker_id = static_cast<int>(w);
    }
    if (generation.worker_id >= 0) return generation;
    // Left out (too late, or the job is full): a newcomer to the next one.
    previous_id = -1;
  }
}

void ElasticMembership::close(int number, Deadline deadline) {
  const std::string members_key = key(number, "members");
  // The generation the survivors come from: the last before this one that was formed (one closed
  // with nobody has no members).
  int base = number - 1;
  std::vector<ElasticMember> previous;
  for (; base >= 0; --base) {
    const std::optional<std::vector<char>> bytes = store_read(*store_, key(base, "members"));
    if (bytes && !bytes->empty()) {
      previous = decode_members(*bytes).list;
      break;
    }
  }
  std::vector<Claim> claims;
  Clock::time_point last_arrival = Clock::now();
  std::optional<Clock::time_point> first_seen;
  for (;;) {
    if (store_holds(*store_, members_key)) return;  // another worker closed it
    while (std::optional<std::vector<char>> bytes =
               store_read(*store_, key(number, absl::StrCat("slot-", claims.size())))) {
      claims.push_back(decode_claim(*bytes));
      last_arrival = Clock::now();
      if (!first_seen) first_seen = last_arrival;
    }
    const auto from_previous = [&](const Claim& c) { return base >= 0 && c.previous_generation == base; };
    const auto survivors = std::count_if(claims.begin(), claims.end(), from_previous);
    const bool quiet = Clock::now() - last_arrival >= options_.settle_time;
    // Workers of the previous generation that every survivor's account has alive and that have not
    // come yet: worth waiting for, within survivor_wait. (Only where base is the generation just
    // before, whose ids the accounts use, and every survivor gave one.)
    const auto awaited_alive = [&] {
      if (base != number - 1 || survivors == 0 || !first_seen ||
          Clock::now() - *first_seen >= options_.survivor_wait) {
        return false;
      }
      std::vector<bool> gone(previous.size(), false);
      for (const Claim& c : claims) {
        if (!from_previous(c)) continue;
        if (c.missed.empty()) return false;
        for (int id : c.missed) {
          if (id >= 0 && static_cast<std::size_t>(id) < gone.size()) gone[static_cast<std::size_t>(id)] = true;
        }
      }
      for (std::size_t id = 0; id < previous.size(); ++id) {
        const bool came = std::any_of(claims.begin(), claims.end(), [&](const Claim& c) {
          return from_previous(c) && c.previous_id == static_cast<int>(id);
        });
        if (!gone[id] && !came) return true;
      }
      return false;
    };
    bool complete = false;
    if (number == 0) {
      complete = static_cast<int>(claims.size()) >= options_.initial_workers;
    } else if (!previous.empty() && survivors == static_cast<std::ptrdiff_t>(previous.size())) {
      complete = true;
    } else if (survivors > 0 && quiet && !awaited_alive()) {
      complete = true;  // the others of the generation before are taken for gone
    } else if (base < 0 && quiet) {
      complete = true;  // no generation was formed before: whoever came
    }
    if (complete) {
      // The survivors in their order, then the newcomers in the order they came.
      std::vector<std::size_t> order(claims.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const auto rank = [&](const Claim& c) {
          if (number == 0) return c.initial_rank;
          return from_previous(c) ? c.previous_id : std::numeric_limits<int>::max();
        };
        return rank(claims[a]) < rank(claims[b]);
      });
      std::size_t size = order.size();
      if (number == 0) size = std::min<std::size_t>(size, static_cast<std::size_t>(options_.initial_workers));
      if (options_.max_workers > 0) size = std::min<std::size_t>(size, static_cast<std::size_t>(options_.max_workers));
      std::vector<ElasticMember> members;
      for (std::size_t i = 0; i < size; ++i) {
        const Claim& c = claims[order[i]];
        members.push_back({c.token, c.host, from_previous(c) ? c.previous_id : -1});
      }
      // Another worker may have closed it first, from what it had seen: the first list stands.
      store_claim(*store_, members_key, bytes_of(encode(base, members)));
      return;
    }
    if (Clock::now() >= deadline) {
      // Closed with nobody, so that workers that come later go on to the next generation instead
      // of waiting for this one's members; unless another worker has just closed it.
      if (!store_claim(*store_, members_key, {})) return;
      if (number == 0) {
        throw DeadlineExceededError(absl::StrCat(
            "elastic membership: waited ", options_.timeout.count(), " ms for the job's ", options_.initial_workers,
            " workers to start; ", claims.size(), " came (give every worker the same world size, and start them "
            "within GlooOptions::rendezvous_timeout)"));
      }
      throw DeadlineExceededError(absl::StrCat(
          "elastic membership: waited ", options_.timeout.count(), " ms to join the job, and none of its ",
          previous.size(), " workers of generation ", base, " came to the next one: the job has ended, or this is "
          "another run under the same job id, which finds the last run's keys (give each run its own id, or a "
          "fresh store)"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace distribute::detail
