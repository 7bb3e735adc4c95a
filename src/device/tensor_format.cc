// Printing tensors the way TF prints eager tensors, and numbers the way Python prints them.
// Arrays of more than 1000 elements are summarised with "..." like numpy.
#include <charconv>
#include <cmath>
#include <algorithm>
#include <string>

#include "distribute/device/number_format.h"
#include "distribute/device/tensor.h"

namespace distribute {
namespace {

constexpr std::int64_t kSummariseAbove = 1000;
constexpr std::int64_t kEdgeItems = 3;

template <class T>
void print_element(std::ostream& os, T value) {
  os << format_number(value);
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

// The shortest decimal text (in std::chars_format `format`) that reads back to `value` as T.
template <class T>
std::string shortest(double value, std::chars_format format) {
  char buf[64];
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<T>(value), format);
    return std::string(buf, end);
  } else {
    // 16-bit floats: the fewest significant digits whose value rounds back to the same T.
    const T target = static_cast<T>(static_cast<float>(value));
    for (int precision = 1;; ++precision) {
      const int digits =
          format == std::chars_format::fixed     ? std::max(0, precision - 1 - static_cast<int>(std::floor(std::log10(std::fabs(value)))))
          : format == std::chars_format::general ? precision
                                                 : precision - 1;
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, format, digits);
      std::string text(buf, end);
      if (static_cast<T>(std::stof(text)) == target || precision >= 17) {
        // Drop trailing zeros of a fixed fraction ("0.10" -> "0.1"), keeping one digit after '.'.
        if (format == std::chars_format::fixed && text.find('.') != std::string::npos) {
          while (text.back() == '0') text.pop_back();
          if (text.back() == '.') text.pop_back();
        }
        return text;
      }
    }
  }
}

}  // namespace

std::string format_number(double value, DType dtype) {
  if (!is_floating(dtype)) return std::to_string(static_cast<long long>(value));
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Decide the notation on the value as its own type prints it (float32 0.0001 is 9.99e-05 as a
  // double, yet prints as 0.0001).
  const double magnitude = std::fabs(std::stod(
      dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) { return shortest<T>(value, std::chars_format::general); })));
  const bool fixed = magnitude == 0.0 || (magnitude >= 1e-4 && magnitude < 1e16);
  const auto format = fixed ? std::chars_format::fixed : std::chars_format::scientific;
  std::string text = dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) { return shortest<T>(value, format); });
  if (fixed && text.find('.') == std::string::npos) text += ".0";
  return text;
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  if (!tensor.defined()) return os << "<Tensor: undefined>";
  os << "<Tensor: shape=" << tensor.shape() << ", dtype=" << tensor.dtype() << ", numpy=";
  print_numpy(os, tensor);
  return os << '>';
}

void print_numpy(std::ostream& os, const Tensor& tensor) {
  // Device tensors print their values as TF's do: copied to the host first.
  const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  dispatch_dtype(tensor.dtype(), [&]<class T>(TypeTag<T>) {
    const T* data = static_cast<const T*>(host.raw_data());
    if (tensor.rank() == 0) {
      print_element(os, data[0]);
    } else {
      if (tensor.rank() > 1) os << '\n';
      print_array(os, data, tensor.shape().dims(), 0, tensor.num_elements() > kSummariseAbove, 0);
    }
  });
}

}  // namespace distribute
