// Fuzz target: the safetensors reader (formats/safetensors/safetensors.h, safetensors.md).
//
// Input: one mode byte, then a file.
//   mode bit 0 = 0: the bytes of a .safetensors file (8-byte header length, JSON header, data),
//                   opened with File::open and Collection::open_file.
//   mode bit 0 = 1: the text of model.safetensors.index.json in a directory that also holds
//                   a.safetensors (tensors "a" and "b") and b.safetensors (tensor "c"), opened
//                   with Collection::open_dir.
// Contract checked: errors throw ucm::safetensors::Error only, naming the path. On success every
// tensor's bytes lie inside the file after the header, nbytes == numel * dtype_size, tensors are
// sorted by name and found by find(); a collection's entries point into their files.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "ucm/safetensors/safetensors.h"

namespace st = ucm::safetensors;

namespace {

std::string small_file(const std::string& header, size_t data_bytes) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char((n >> (8 * i)) & 0xff);
  f += header;
  f.append(data_bytes, '\x01');
  return f;
}

const std::string& shard_dir() {
  static const std::string dir = [] {
    std::string d = ucm_fuzz::scratch_dir() + "/model";
    std::filesystem::create_directories(d);
    const std::string a = small_file(
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})",
        12);
    const std::string b = small_file(R"({"__metadata__":{"format":"pt"},"c":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", 1);
    ucm_fuzz::write_file(d + "/a.safetensors", a.data(), a.size());
    ucm_fuzz::write_file(d + "/b.safetensors", b.data(), b.size());
    return d;
  }();
  return dir;
}

void check_file(const st::File& f) {
  const auto& ts = f.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const st::TensorInfo& t = ts[i];
    if (i > 0) FUZZ_CHECK(ts[i - 1].name < t.name);
    FUZZ_CHECK(f.find(t.name) == &t);
    FUZZ_CHECK(t.offset >= 8 && t.offset <= f.file_size() && t.nbytes <= f.file_size() - t.offset);
    const int64_t numel = t.numel();
    FUZZ_CHECK(numel >= 0);
    FUZZ_CHECK(uint64_t(numel) * st::dtype_size(t.dtype) == t.nbytes);
    FUZZ_CHECK(st::dtype_from_name(st::dtype_name(t.dtype)) == t.dtype);
    const auto bytes = f.data(t);
    FUZZ_CHECK(bytes.size() == t.nbytes);
    if (!bytes.empty()) {
      volatile std::byte first = bytes.front(), last = bytes.back();  // inside the mapping
      (void)first;
      (void)last;
    }
  }
  FUZZ_CHECK(f.find("\x01no such tensor") == nullptr);
}

bool names_path(const st::Error& e) { return std::string_view(e.what()).find(ucm_fuzz::scratch_dir()) != std::string_view::npos; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  if ((mode & 1) == 0) {
    static const std::string path = ucm_fuzz::scratch_dir() + "/fuzz.safetensors";
    ucm_fuzz::write_file(path, data + 1, size - 1);
    try {
      auto f = st::File::open(path);
      FUZZ_CHECK(f->file_size() == size - 1);
      check_file(*f);
      const st::Collection c = st::Collection::open_file(path);
      FUZZ_CHECK(c.names().size() == f->tensors().size());
      for (const std::string& n : c.names()) FUZZ_CHECK(c.at(n).info->name == n);
    } catch (const st::Error& e) {
      FUZZ_CHECK_MSG(names_path(e), e.what());
    }
  } else {
    const std::string& dir = shard_dir();
    ucm_fuzz::write_file(dir + "/model.safetensors.index.json", data + 1, size - 1);
    try {
      const st::Collection c = st::Collection::open_dir(dir);
      for (const auto& f : c.files()) check_file(*f);
      for (const std::string& n : c.names()) {
        const auto e = c.at(n);
        FUZZ_CHECK(e.info->name == n && e.file->find(n) == e.info);
        FUZZ_CHECK(e.data().size() == e.info->nbytes);
      }
    } catch (const st::Error& e) {
      FUZZ_CHECK_MSG(names_path(e), e.what());
    }
  }
  return 0;
}
