// Device: where a replica runs and where a tensor's memory lives. Parses TF device strings:
// "CPU:0", "gpu:1", "/device:GPU:1", "/cpu:0", "/job:localhost/replica:0/task:0/device:CPU:0".
// "CPU:k" are logical CPU devices: all share host memory, but each MirroredStrategy replica runs on
// its own thread and allocates from its own memory pool.
#pragma once

#include <compare>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace distribute {

class Device {
 public:
  enum class Type : std::uint8_t { kCpu, kGpu };

  Device() = default;  // CPU:0
  Device(Type type, int index);

  // Throws InvalidArgumentError for anything that is not a device string of the forms above.
  static Device parse(std::string_view spec);
  static Device cpu(int index = 0) { return Device(Type::kCpu, index); }
  static Device gpu(int index = 0) { return Device(Type::kGpu, index); }

  Type type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == Type::kCpu; }
  bool is_gpu() const { return type_ == Type::kGpu; }
  const std::string& job() const;
  int replica() const { return replica_; }
  int task() const { return task_; }

  // The canonical full name: "/job:localhost/replica:0/task:0/device:CPU:0".
  std::string to_string() const;
  // "CPU:0".
  std::string short_name() const;

  // Job names are interned, so equal jobs have equal pointers.
  friend bool operator==(const Device&, const Device&) = default;
  friend std::strong_ordering operator<=>(const Device& a, const Device& b);

 private:
  Type type_ = Type::kCpu;
  int index_ = 0;
  // The job name, interned (never freed); null for "localhost". A pointer keeps Device trivially
  // copyable: every buffer of every collective carries one.
  const std::string* job_ = nullptr;
  int replica_ = 0;
  int task_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Where tensors are created when no device is given: inside a replica's function the replica's
// device (as ops inside tf.distribute's run are placed on the replica's device), else CPU:0.
Device default_device();
// The CPU device host memory made here belongs to: default_device() when it is a CPU (a CPU
// replica's own), else CPU:0. Where tensors over other libraries' host memory are placed.
Device default_host_device();

namespace detail {
// Sets what default_device() returns on this thread (null: CPU:0) and returns what it was. The
// replica layer sets it as a thread enters and leaves a replica's context; `device` must stay
// valid until it is replaced.
const Device* set_default_device(const Device* device) noexcept;
}  // namespace detail

}  // namespace distribute
