#include "ucm/safetensors/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace ucm::safetensors {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // same cap as the reference implementation

struct DTypeRow {
  DType d;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},         {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2},       {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I32, "I32", 4},       {DType::U32, "U32", 4},
    {DType::F32, "F32", 4},   {DType::I64, "I64", 8},       {DType::U64, "U64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("safetensors: " + path + ": " + what);
}

}  // namespace

size_t dtype_size(DType d) {
  for (const auto& r : kDTypes)
    if (r.d == d) return r.size;
  return 0;
}

const char* dtype_name(DType d) {
  for (const auto& r : kDTypes)
    if (r.d == d) return r.name;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& r : kDTypes)
    if (s == r.name) return r.d;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

File::~File() {
  if (base_ != nullptr && size_ > 0) ::munmap(const_cast<std::byte*>(base_), size_);
}

std::shared_ptr<File> File::open(const std::string& path) {
  std::shared_ptr<File> f(new File());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("fstat failed: ") + std::strerror(e));
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    fail(path, "file is " + std::to_string(f->size_) + " bytes, shorter than the 8-byte header length");
  }
  void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(e));
  f->base_ = static_cast<const std::byte*>(p);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(f->base_[i]);
  if (n > kMaxHeader) fail(path, "header length " + std::to_string(n) + " exceeds 100 MiB");
  if (n > f->size_ - 8)
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(f->size_) + " bytes)");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = f->size_ - data_start;

  nlohmann::json h;
  try {
    h = nlohmann::json::parse(reinterpret_cast<const char*>(f->base_ + 8),
                              reinterpret_cast<const char*>(f->base_ + 8 + n));
  } catch (const nlohmann::json::exception& ex) {
    fail(path, std::string("header is not valid JSON: ") + ex.what());
  }
  if (!h.is_object()) fail(path, "header is not a JSON object");

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ value for '" + m.key() + "' is not a string");
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(path, where + "entry must be an object with dtype, shape, data_offsets");
    TensorInfo t;
    t.name = key;
    if (!v["dtype"].is_string()) fail(path, where + "dtype is not a string");
    auto d = dtype_from_name(v["dtype"].get<std::string>());
    if (!d) fail(path, where + "unknown dtype '" + v["dtype"].get<std::string>() + "'");
    t.dtype = *d;
    if (!v["shape"].is_array()) fail(path, where + "shape is not an array");
    uint64_t numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) fail(path, where + "shape has a non-integer or negative entry");
      const uint64_t dim = s.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim) fail(path, where + "shape overflows");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, where + "data_offsets must be [begin, end] non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > data_size)
      fail(path, where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(end) +
                     "] outside the data section of " + std::to_string(data_size) + " bytes");
    t.nbytes = end - b;
    if (t.nbytes != numel * dtype_size(t.dtype))
      fail(path, where + "data_offsets span " + std::to_string(t.nbytes) + " bytes but shape x dtype needs " +
                     std::to_string(numel * dtype_size(t.dtype)));
    t.offset = data_start + b;
    f->tensors_.push_back(std::move(t));
  }
  std::sort(f->tensors_.begin(), f->tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return f;
}

const TensorInfo* File::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

std::span<const std::byte> File::data(const TensorInfo& t) const {
  return {base_ + t.offset, static_cast<size_t>(t.nbytes)};
}

Collection Collection::open_file(const std::string& path) {
  Collection c;
  c.source_ = path;
  auto f = File::open(path);
  for (const auto& t : f->tensors()) c.index_.emplace(t.name, Entry{f.get(), &t});
  c.files_.push_back(std::move(f));
  return c;
}

Collection Collection::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  const fs::path index = d / "model.safetensors.index.json";
  const fs::path single = d / "model.safetensors";
  if (!fs::exists(index)) {
    if (!fs::exists(single))
      throw Error("safetensors: " + dir + ": neither model.safetensors nor model.safetensors.index.json exists");
    Collection c = open_file(single.string());
    c.source_ = dir;
    return c;
  }
  nlohmann::json j;
  try {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& ex) {
    fail(index.string(), std::string("not valid JSON: ") + ex.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index.string(), "missing object \"weight_map\"");
  Collection c;
  c.source_ = dir;
  std::map<std::string, std::shared_ptr<File>> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail(index.string(), "weight_map['" + it.key() + "'] is not a string");
    const std::string shard = it.value().get<std::string>();
    if (shard.find('/') != std::string::npos || shard == "..")
      fail(index.string(), "shard name '" + shard + "' must be a plain file name");
    auto& f = shards[shard];
    if (!f) {
      f = File::open((d / shard).string());
      c.files_.push_back(f);
    }
    const TensorInfo* t = f->find(it.key());
    if (t == nullptr) fail(f->path(), "tensor '" + it.key() + "' listed in the index is not in this shard");
    c.index_.emplace(it.key(), Entry{f.get(), t});
  }
  return c;
}

std::vector<std::string> Collection::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

std::optional<Collection::Entry> Collection::find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

Collection::Entry Collection::at(std::string_view name) const {
  auto e = find(name);
  if (!e) throw Error("safetensors: tensor '" + std::string(name) + "' not found in " + source_);
  return *e;
}

}  // namespace ucm::safetensors
