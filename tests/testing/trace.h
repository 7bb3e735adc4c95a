// Reading a timeline's file in the timeline tests: the trace-event schema and the pairing of
// begins and ends checked on every track, and the collectives and events of one track.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace distribute::testing {

inline nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);  // throws on anything that is not JSON
}

// Whether Python's json module loads the file, where python3 is installed (else true).
inline bool python_loads(const std::string& path) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) return true;
  return std::system(("python3 -c 'import json, sys; json.load(open(sys.argv[1]))' '" + path + "'").c_str()) == 0;
}

// Checks the schema of every event and that begins and ends pair up, by name, on every track in
// the order of their timestamps; returns the events that are not metadata.
inline std::vector<nlohmann::json> check_schema(const nlohmann::json& trace) {
  EXPECT_TRUE(trace.is_object());
  EXPECT_TRUE(trace.at("traceEvents").is_array());
  std::vector<nlohmann::json> events;
  std::map<std::pair<int, int>, std::vector<std::string>> open;
  std::map<std::pair<int, int>, double> last_ts;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    for (const char* key : {"name", "ph", "ts", "pid", "tid"}) EXPECT_TRUE(event.contains(key)) << key << " in " << event;
    EXPECT_TRUE(event.at("name").is_string());
    EXPECT_TRUE(event.at("ts").is_number());
    EXPECT_TRUE(event.at("pid").is_number_integer());
    EXPECT_TRUE(event.at("tid").is_number_integer());
    const std::string ph = event.at("ph");
    if (ph == "M") continue;
    events.push_back(event);
    const std::pair<int, int> track{event.at("pid"), event.at("tid")};
    const double ts = event.at("ts");
    EXPECT_GE(ts, last_ts[track]) << event;
    last_ts[track] = ts;
    if (ph == "B") {
      open[track].push_back(event.at("name"));
    } else if (ph == "E") {
      EXPECT_FALSE(open[track].empty()) << "an end without a begin: " << event;
      if (open[track].empty()) continue;
      EXPECT_EQ(open[track].back(), event.at("name").get<std::string>());
      open[track].pop_back();
    } else {
      EXPECT_EQ(ph, "i") << event;
    }
  }
  for (const auto& [track, names] : open) {
    EXPECT_TRUE(names.empty()) << "unclosed on pid " << track.first << " tid " << track.second;
  }
  return events;
}

// The names the metadata events give: {pid, -1} for a process, {pid, tid} for a thread.
inline std::map<std::pair<int, int>, std::string> track_names(const nlohmann::json& trace) {
  std::map<std::pair<int, int>, std::string> names;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    const int tid = e.at("name") == "process_name" ? -1 : e.at("tid").get<int>();
    names[{e.at("pid"), tid}] = e.at("args").at("name");
  }
  return names;
}

inline std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Every collective's begin on track (pid, tid), as (name, sequence), in order: the spans with a
// sequence, which their phases ("wait", "data", "vote", "local") have not.
inline std::vector<std::pair<std::string, std::int64_t>> collectives_of(const std::vector<nlohmann::json>& events,
                                                                        int pid, int tid) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const nlohmann::json& e : events) {
    if (e.at("pid") == pid && e.at("tid") == tid && e.at("ph") == "B" && e.contains("args") &&
        e.at("args").contains("sequence")) {
      out.emplace_back(e.at("name"), e.at("args").at("sequence"));
    }
  }
  return out;
}

inline int count(const std::vector<nlohmann::json>& events, int pid, int tid, const std::string& name,
                 const std::string& ph) {
  int n = 0;
  for (const nlohmann::json& e : events) {
    n += e.at("pid") == pid && e.at("tid") == tid && e.at("name") == name && e.at("ph") == ph;
  }
  return n;
}

}  // namespace distribute::testing
