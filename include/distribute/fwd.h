// Forward declarations of distribute's public types, for headers (the library's and a user's)
// that name them without needing their definitions.
#pragma once

#include <cstdint>

namespace distribute {

// device/
class Device;
enum class DType : std::uint8_t;
enum class ReduceOp;
class Shape;
class Tensor;

// collective/
struct CommunicationOptions;
enum class CommunicationImplementation;
enum class Compression;

// values/
template <class T>
class DistributedValues;
template <class T>
class PerReplica;
template <class T>
class Mirrored;
class ValueContext;
class InputContext;

// replica/
class ReplicaContext;

// strategy/
class Strategy;
class StrategyExtended;
class StrategyScope;
class DefaultStrategy;
class OneDeviceStrategy;
class MirroredStrategy;
struct MirroredStrategyOptions;
enum class CrossDeviceOps;

// variables/, optimizers/, checkpoint/
class Variable;
struct VariableOptions;
enum class VariableSynchronization;
enum class VariableAggregation;
namespace optimizers {
class Optimizer;
class SGD;
class Adam;
}  // namespace optimizers
class Checkpoint;

}  // namespace distribute
