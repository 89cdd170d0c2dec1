// Read-only safetensors reader (spec: safetensors.md beside this file).
//
// A File mmaps one `.safetensors` file (read-only, MAP_SHARED) and parses its JSON
// header; tensor data are returned as raw little-endian bytes pointing into the
// mapping, valid as long as the File lives. A Collection opens a model directory:
// either `model.safetensors` or the shards named by `model.safetensors.index.json`.
// No torch dependency: callers convert bytes themselves.
//
// All errors throw ucm::safetensors::Error with the file path and what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ucm::safetensors {

/// Any malformed file, missing file or unknown tensor. what() names the path.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Element types of the safetensors spec (names as written in the header).
enum class DType : uint8_t { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64, F8_E4M3, F8_E5M2 };

/// Bytes per element (1, 2, 4 or 8).
size_t dtype_size(DType d);
/// Header spelling, e.g. "F32", "BF16".
const char* dtype_name(DType d);
/// Parse a header dtype string; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view s);

/// One tensor entry of a header. `offset` is relative to the file start (already
/// shifted past the 8-byte length and the JSON header); `nbytes` = numel * dtype_size.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // empty for a scalar
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  int64_t numel() const;
};

/// One mmapped safetensors file. Not copyable; share through shared_ptr.
class File {
 public:
  /// Opens and validates `path`: header length fits the file, header is a JSON
  /// object, every entry has a known dtype, non-negative shape, data_offsets with
  /// begin <= end inside the data section and end - begin == numel * dtype_size.
  /// Throws Error otherwise.
  static std::shared_ptr<File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  /// All tensors, sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// nullptr if absent.
  const TensorInfo* find(std::string_view name) const;
  /// Raw bytes of a tensor of this file (little-endian, row-major).
  std::span<const std::byte> data(const TensorInfo& t) const;
  /// The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Size of the whole file in bytes.
  uint64_t file_size() const { return size_; }

 private:
  File() = default;
  std::string path_;
  const std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// The tensors of a model directory, possibly sharded.
class Collection {
 public:
  struct Entry {
    const File* file;
    const TensorInfo* info;
    std::span<const std::byte> data() const { return file->data(*info); }
  };

  /// Opens `dir/model.safetensors.index.json` if present (its "weight_map" maps
  /// tensor name -> shard file name; every listed tensor must be in its shard),
  /// else `dir/model.safetensors`. Throws Error if neither exists or on any
  /// malformed file, naming the path.
  static Collection open_dir(const std::string& dir);
  /// Single file.
  static Collection open_file(const std::string& path);

  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  std::optional<Entry> find(std::string_view name) const;
  /// Like find() but throws Error("tensor NAME not found in WHERE").
  Entry at(std::string_view name) const;
  /// The directory or file this was opened from.
  const std::string& source() const { return source_; }
  const std::vector<std::shared_ptr<File>>& files() const { return files_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<File>> files_;
  std::map<std::string, Entry, std::less<>> index_;
};

}  // namespace ucm::safetensors
