// The IDX reader: gunzip with zlib, then check the header before trusting a single size.
#include "idx.h"

#include <zlib.h>

#include <array>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace fashion_mnist {
namespace {

using distribute::DataLossError;
using distribute::InvalidArgumentError;

constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;

std::uint32_t big_endian(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return std::uint32_t{bytes[at]} << 24 | std::uint32_t{bytes[at + 1]} << 16 | std::uint32_t{bytes[at + 2]} << 8 |
         std::uint32_t{bytes[at + 3]};
}

// The header's dimensions after checking the magic number; the payload must hold exactly their
// product of bytes.
std::vector<std::int64_t> checked_dims(const std::vector<std::uint8_t>& bytes, std::uint32_t magic, int rank,
                                       const std::filesystem::path& path) {
  // The magic number first: a file of the other kind is named as such, whatever its length.
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() >= 4 && big_endian(bytes, 0) != magic) {
    throw InvalidArgumentError(absl::StrCat(path.string(), ": magic number 0x", absl::Hex(big_endian(bytes, 0), absl::kZeroPad8),
                                            " where an IDX file of ", rank == 1 ? "labels" : "images", " has 0x",
                                            absl::Hex(magic, absl::kZeroPad8), "; is it the right file?"));
  }
  if (bytes.size() < header) {
    throw DataLossError(absl::StrCat(path.string(), ": ", bytes.size(), " bytes, shorter than an IDX header of ",
                                     header, " bytes; the file is truncated"));
  }
  std::vector<std::int64_t> dims;
  std::int64_t payload = 1;
  for (int d = 0; d < rank; ++d) {
    dims.push_back(big_endian(bytes, 4 + 4 * static_cast<std::size_t>(d)));
    payload *= dims.back();
  }
  if (static_cast<std::int64_t>(bytes.size() - header) != payload) {
    const bool short_file = static_cast<std::int64_t>(bytes.size() - header) < payload;
    const std::string what = absl::StrCat(path.string(), ": the header announces ", payload, " bytes of data but the file holds ",
                                          bytes.size() - header);
    if (short_file) throw DataLossError(what + "; the file is truncated");
    throw InvalidArgumentError(what + "; it is not a well-formed IDX file");
  }
  return dims;
}

}  // namespace

std::vector<std::uint8_t> read_gzip(const std::filesystem::path& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    throw InvalidArgumentError(absl::StrCat(path.string(), ": cannot open it (install the Debian package "
                                            "dataset-fashion-mnist, or pass --data_dir)"));
  }
  std::vector<std::uint8_t> out;
  std::array<std::uint8_t, 1 << 16> chunk;
  while (true) {
    const int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw DataLossError(absl::StrCat(path.string(), ": the gzip stream is corrupt (", message, ")"));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // A stream cut short ends without error from gzread; zlib says so only here.
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    throw DataLossError(absl::StrCat(path.string(), ": the gzip stream is corrupt (", message, ")"));
  }
  if (gzdirect(file.get()) != 0) {
    throw InvalidArgumentError(absl::StrCat(path.string(), ": not a gzip file; Fashion-MNIST's files are gzipped IDX"));
  }
  return out;
}

Split load_split(const std::filesystem::path& images_path, const std::filesystem::path& labels_path,
                 std::int64_t limit) {
  const std::vector<std::uint8_t> image_bytes = read_gzip(images_path);
  const std::vector<std::uint8_t> label_bytes = read_gzip(labels_path);
  const std::vector<std::int64_t> image_dims = checked_dims(image_bytes, kImagesMagic, 3, images_path);
  const std::vector<std::int64_t> label_dims = checked_dims(label_bytes, kLabelsMagic, 1, labels_path);
  if (image_dims[1] * image_dims[2] != kPixels) {
    throw InvalidArgumentError(absl::StrCat(images_path.string(), ": images of ", image_dims[1], "x", image_dims[2],
                                            " pixels; Fashion-MNIST's are 28x28"));
  }
  if (image_dims[0] != label_dims[0]) {
    throw InvalidArgumentError(absl::StrCat(images_path.string(), " holds ", image_dims[0], " images but ",
                                            labels_path.string(), " holds ", label_dims[0], " labels"));
  }
  const std::int64_t n = limit > 0 ? std::min(limit, image_dims[0]) : image_dims[0];
  Split split;
  split.images = distribute::Tensor::empty(distribute::DType::kFloat32, distribute::Shape{n, kPixels},
                                           distribute::Device::cpu());
  split.labels = distribute::Tensor::empty(distribute::DType::kInt32, distribute::Shape{n}, distribute::Device::cpu());
  float* pixels = split.images.data<float>();
  std::int32_t* labels = split.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < n * kPixels; ++i) pixels[i] = static_cast<float>(image_bytes[16 + i]) / 255.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t label = label_bytes[8 + static_cast<std::size_t>(i)];
    if (label >= kClasses) {
      throw InvalidArgumentError(absl::StrCat(labels_path.string(), ": label ", int{label}, " of example ", i,
                                              " is not a class in 0-", kClasses - 1));
    }
    labels[i] = label;
  }
  return split;
}

FashionMnist load(const std::filesystem::path& dir, std::int64_t train_limit) {
  FashionMnist data;
  data.train = load_split(dir / "train-images-idx3-ubyte.gz", dir / "train-labels-idx1-ubyte.gz", train_limit);
  data.test = load_split(dir / "t10k-images-idx3-ubyte.gz", dir / "t10k-labels-idx1-ubyte.gz");
  return data;
}

}  // namespace fashion_mnist
