// Printing tensors the way TF prints eager tensors. Floats use the shortest text that reads back
// to the same value, with ".0" added to integral values (Python's repr); arrays of more than 1000
// elements are summarised with "..." like numpy.
#include <charconv>
#include <cmath>
#include <sstream>

#include "distribute/device/tensor.h"

namespace distribute {
namespace {

constexpr std::int64_t kSummariseAbove = 1000;
constexpr std::int64_t kEdgeItems = 3;

template <class T>
void print_element(std::ostream& os, T value) {
  if constexpr (std::is_integral_v<T>) {
    os << value;
  } else {
    const double v = static_cast<double>(value);
    if (std::isnan(v)) {
      os << "nan";
    } else if (std::isinf(v)) {
      os << (v < 0 ? "-inf" : "inf");
    } else {
      char buf[64];
      using Native = std::conditional_t<std::is_same_v<T, double>, double, float>;
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<Native>(v));
      std::string_view text(buf, static_cast<std::size_t>(end - buf));
      os << text;
      if (text.find_first_of(".e") == std::string_view::npos) os << ".0";
    }
  }
}

template <class T>
void print_array(std::ostream& os, const T* data, const std::vector<std::int64_t>& dims,
                 std::size_t dim, bool summarise, int indent) {
  const std::int64_t n = dims[dim];
  std::int64_t stride = 1;
  for (std::size_t i = dim + 1; i < dims.size(); ++i) stride *= dims[i];
  os << '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      os << (dim + 1 == dims.size() ? ", " : ",\n" + std::string(static_cast<std::size_t>(indent + 1), ' '));
      continue;
    }
    if (dim + 1 == dims.size()) {
      print_element(os, data[i]);
    } else {
      print_array(os, data + i * stride, dims, dim + 1, summarise, indent + 1);
    }
    if (i + 1 < n) {
      os << (dim + 1 == dims.size() ? ", " : ",\n" + std::string(static_cast<std::size_t>(indent + 1), ' '));
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  if (!tensor.defined()) return os << "<Tensor: undefined>";
  os << "<Tensor: shape=" << tensor.shape() << ", dtype=" << tensor.dtype() << ", numpy=";
  if (!tensor.device().is_cpu()) return os << "(on " << tensor.device().short_name() << ")>";
  dispatch_dtype(tensor.dtype(), [&]<class T>(TypeTag<T>) {
    const T* data = static_cast<const T*>(tensor.raw_data());
    if (tensor.rank() == 0) {
      print_element(os, data[0]);
    } else {
      if (tensor.rank() > 1) os << '\n';
      print_array(os, data, tensor.shape().dims(), 0, tensor.num_elements() > kSummariseAbove, 0);
    }
  });
  return os << '>';
}

}  // namespace distribute
