// Unit tests of the safetensors reader (formats/safetensors) on files written by hand
// per formats/safetensors/safetensors.md (see st_writer.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "ucm/safetensors/safetensors.h"
#include "st_writer.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
namespace st = ucm::safetensors;
using ucm::testing::st_bytes;
using ucm::testing::StTensor;

namespace {

class SafetensorsTest : public ucm::test::MkdtempTest {
 protected:
  SafetensorsTest() : MkdtempTest("ucm_st_") {}
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const st::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST_F(SafetensorsTest, ReadsDtypesShapesBytesAndMetadata) {
  std::vector<float> a = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  std::vector<uint16_t> b = {0x3c00, 0xc000};  // fp16 1.0, -2.0
  std::vector<int64_t> c = {-7};
  ucm::testing::st_write(path("x.safetensors"),
                         {{"b.weight", "F16", {2}, st_bytes(b)}, {"a", "F32", {2, 3}, st_bytes(a)}, {"s", "I64", {}, st_bytes(c)}},
                         R"({"format":"pt","note":"hand"})");
  auto f = st::File::open(path("x.safetensors"));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // sorted
  EXPECT_EQ(f->tensors()[1].name, "b.weight");
  const auto* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, st::DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numel(), 6);
  auto da = f->data(*ta);
  ASSERT_EQ(da.size(), 24u);
  EXPECT_EQ(std::memcmp(da.data(), a.data(), 24), 0);
  const auto* tb = f->find("b.weight");
  EXPECT_EQ(tb->dtype, st::DType::F16);
  EXPECT_EQ(std::memcmp(f->data(*tb).data(), b.data(), 4), 0);
  const auto* ts = f->find("s");
  EXPECT_TRUE(ts->shape.empty());
  EXPECT_EQ(ts->numel(), 1);
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "hand");
  EXPECT_EQ(st::dtype_size(st::DType::BF16), 2u);
  EXPECT_EQ(std::string(st::dtype_name(st::DType::I64)), "I64");
  EXPECT_FALSE(st::dtype_from_name("F128").has_value());
}

TEST_F(SafetensorsTest, RejectsMalformedFiles) {
  // Shorter than 8 bytes.
  { std::ofstream(path("short.safetensors")) << "abc"; }
  EXPECT_NE(error_of([&] { st::File::open(path("short.safetensors")); }).find("shorter than the 8-byte"), std::string::npos);
  // Header length past the end.
  StTensor t{"w", "F32", {2}, st_bytes(std::vector<float>{1, 2})};
  std::string h = ucm::testing::st_header({t}, "");
  {
    std::ofstream f(path("long.safetensors"), std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << h;
  }
  EXPECT_NE(error_of([&] { st::File::open(path("long.safetensors")); }).find("runs past the end"), std::string::npos);
  // Bad JSON.
  ucm::testing::st_write_raw(path("json.safetensors"), "{\"w\":[1,2    ", {t});
  EXPECT_NE(error_of([&] { st::File::open(path("json.safetensors")); }).find("not valid JSON"), std::string::npos);
  // Unknown dtype.
  ucm::testing::st_write(path("dtype.safetensors"), {{"w", "F7", {2}, st_bytes(std::vector<float>{1, 2})}});
  EXPECT_NE(error_of([&] { st::File::open(path("dtype.safetensors")); }).find("unknown dtype 'F7'"), std::string::npos);
  // Byte count inconsistent with shape x dtype.
  ucm::testing::st_write(path("size.safetensors"), {{"w", "F32", {3}, st_bytes(std::vector<float>{1, 2})}});
  auto e = error_of([&] { st::File::open(path("size.safetensors")); });
  EXPECT_NE(e.find("tensor 'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("needs 12"), std::string::npos) << e;
  // Offsets outside the data section (file truncated after the header).
  ucm::testing::st_write_raw(path("trunc.safetensors"), h, {});
  EXPECT_NE(error_of([&] { st::File::open(path("trunc.safetensors")); }).find("outside the data section"), std::string::npos);
  // Missing file names the path.
  e = error_of([&] { st::File::open(path("nope.safetensors")); });
  EXPECT_NE(e.find("nope.safetensors"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, OpensSingleAndShardedDirectories) {
  EXPECT_NE(error_of([&] { st::Collection::open_dir(dir_.string()); }).find("neither model.safetensors"), std::string::npos);

  ucm::testing::st_write(path("model-00001-of-00002.safetensors"),
                         {{"a", "F32", {1}, st_bytes(std::vector<float>{1})}, {"b", "F32", {1}, st_bytes(std::vector<float>{2})}});
  ucm::testing::st_write(path("model-00002-of-00002.safetensors"), {{"c", "BF16", {2}, st_bytes(std::vector<uint16_t>{0x3f80, 0})}});
  {
    std::ofstream(path("model.safetensors.index.json"))
        << R"({"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
        << R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})";
  }
  auto c = st::Collection::open_dir(dir_.string());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(c.files().size(), 2u);
  auto ec = c.at("c");
  EXPECT_EQ(ec.info->dtype, st::DType::BF16);
  EXPECT_EQ(ec.data().size(), 4u);
  EXPECT_FALSE(c.find("zz").has_value());
  auto e = error_of([&] { c.at("zz"); });
  EXPECT_NE(e.find("tensor 'zz' not found in " + dir_.string()), std::string::npos) << e;

  // An index naming a tensor that its shard lacks.
  {
    std::ofstream(path("model.safetensors.index.json"))
        << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","q":"model-00002-of-00002.safetensors"}})";
  }
  e = error_of([&] { st::Collection::open_dir(dir_.string()); });
  EXPECT_NE(e.find("tensor 'q' listed in the index is not in this shard"), std::string::npos) << e;
}

}  // namespace
