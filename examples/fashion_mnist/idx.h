// Reading Fashion-MNIST's gzipped IDX files (Debian's dataset-fashion-mnist installs them under
// /usr/share/datasets/fashion-mnist/): unsigned-byte images (magic 0x00000803, count x rows x
// cols) and labels (magic 0x00000801, count). Every header field and size is checked, so a wrong,
// truncated or corrupt file is an error that names the file and what is wrong with it:
//   InvalidArgumentError: a file that cannot be opened, is not gzip, or has the wrong magic number
//                         or dimensions (labels outside 0-9, images and labels of different counts);
//   DataLossError:        a file shorter than its header says, or whose gzip stream is corrupt.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "distribute/distribute.h"

namespace fashion_mnist {

inline constexpr int kClasses = 10;
inline constexpr std::int64_t kPixels = 28 * 28;

// One split of the data: images as float32 [n, 784] scaled to [0, 1], labels as int32 [n].
struct Split {
  distribute::Tensor images;
  distribute::Tensor labels;
  std::int64_t size() const { return labels.num_elements(); }
};

struct FashionMnist {
  Split train;
  Split test;
};

// The whole decompressed contents of a gzip file.
std::vector<std::uint8_t> read_gzip(const std::filesystem::path& path);

// The four files of `dir`; `train_limit` > 0 keeps only the first train_limit training examples.
FashionMnist load(const std::filesystem::path& dir, std::int64_t train_limit = 0);

// One split from its two files.
Split load_split(const std::filesystem::path& images, const std::filesystem::path& labels, std::int64_t limit = 0);

}  // namespace fashion_mnist
