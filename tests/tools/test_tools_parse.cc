// Byte / duration parsing, the YAML store config, exit codes and dtype conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <utility>

#include "admin_internal.h"
#include "tools_test_util.h"
#include "ucm/admin.h"
#include "ucm/half.h"

using namespace ucm;
using namespace ucm::admin;

namespace {

// Each text of `cases` parses with `parse` to its value.
void expect_parses(Status (*parse)(const std::string&, uint64_t*),
                   std::initializer_list<std::pair<const char*, uint64_t>> cases) {
  for (const auto& [text, want] : cases) {
    uint64_t v = want + 1;  // (each parse must write its value)
    ASSERT_TRUE(parse(text, &v).ok()) << text;
    EXPECT_EQ(v, want) << text;
  }
}

}  // namespace

TEST(ParseBytes, Units) {
  expect_parses(parse_bytes, {{"1000", 1000u}, {"10G", 10'000'000'000ull}, {"512MiB", 512ull << 20},
                              {"1.5KiB", 1536u}, {"2tib", 2ull << 40}, {" 7 kB ", 7000u}, {"0", 0u}});
}

TEST(ParseBytes, Errors) {
  uint64_t v = 42;
  for (const char* bad : {"", "abc", "-5", "10X", "10Gi B", "1.", "99999999999P", "G"}) {
    Status st = parse_bytes(bad, &v);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("512MiB"), std::string::npos) << "message shows the forms";
  }
  EXPECT_EQ(v, 42u);
}

TEST(ParseDuration, Units) {
  expect_parses(parse_duration, {{"500ms", 500u}, {"45s", 45000u}, {"15m", 900000u}, {"12h", 12ull * 3600 * 1000},
                                 {"30d", 30ull * 86400 * 1000}, {"1w", 7ull * 86400 * 1000}, {"1h30m", 5400000u},
                                 {"60", 60000u}, {"0", 0u}, {"1.5s", 1500u}});
}

TEST(ParseDuration, Errors) {
  uint64_t ms = 7;
  for (const char* bad : {"", "-1s", "5y", "h", "1h30", "ms", "3 days"})
    EXPECT_EQ(parse_duration(bad, &ms).code(), Code::kInvalidArgument) << bad;
  EXPECT_EQ(ms, 7u);
}

TEST(FormatTime, IsoAndAges) {
  EXPECT_EQ(format_time_ms(0), "-");
  EXPECT_EQ(format_time_ms(1700000000123ull), "2023-11-14T22:13:20.123Z");
  const uint64_t now = 1700000000000ull;
  EXPECT_EQ(format_age(0, now), "-");
  EXPECT_EQ(format_age(now, now), "just now");
  EXPECT_EQ(format_age(now - 999, now), "just now");
  EXPECT_EQ(format_age(now - 45000, now), "45 s ago");
  EXPECT_EQ(format_age(now - 119999, now), "119 s ago");
  EXPECT_EQ(format_age(now - 120000, now), "2 min ago");
  EXPECT_EQ(format_age(now - 17 * 60000ull, now), "17 min ago");
  EXPECT_EQ(format_age(now - 5 * 3600000ull, now), "5 h ago");
  EXPECT_EQ(format_age(now - 47 * 3600000ull, now), "47 h ago");
  EXPECT_EQ(format_age(now - 3 * 86400000ull - 1, now), "3 d ago");
  EXPECT_EQ(format_age(now + 500, now), "just now");
  EXPECT_EQ(format_age(now + 5000, now), "in the future");
}

TEST(ExitCodes, Mapping) {
  EXPECT_EQ(exit_code(Status::OK()), 0);
  EXPECT_EQ(exit_code(Status::IOError("x")), 1);
  EXPECT_EQ(exit_code(Status::InvalidArgument("x")), 1);
  EXPECT_EQ(exit_code(Status::Corruption("x")), 3);
  EXPECT_EQ(exit_code(Status::Busy("x")), 4);
  EXPECT_EQ(exit_code(Status::Version("x")), 5);
}

TEST(Config, ExampleFileParses) {
  StoreConfig c;
  Status st = load_config(UCM_SOURCE_DIR "/configs/store.yaml", &c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c.io_threads, 8u);
  EXPECT_TRUE(c.direct_io);
  EXPECT_EQ(c.gc_grace_ms, 60000u);
  EXPECT_DOUBLE_EQ(c.gc_compact_dead_ratio, 0.5);
  EXPECT_FALSE(c.gc_max_bytes.has_value());
}

TEST(Config, ValuesAndErrors) {
  test::TempDir d;
  auto write = [&](const std::string& text) {
    std::ofstream(d.sub("c.yaml")) << text;
    return d.sub("c.yaml");
  };
  StoreConfig c;
  ASSERT_TRUE(load_config(write("io_threads: 3\ndirect_io: false\ngc:\n  max_bytes: 1GiB\n  "
                                "max_age: 2d\n  grace: 0\n"),
                          &c)
                  .ok());
  EXPECT_EQ(c.io_threads, 3u);
  EXPECT_FALSE(c.direct_io);
  EXPECT_EQ(*c.gc_max_bytes, 1ull << 30);
  EXPECT_EQ(*c.gc_max_age_ms, 2ull * 86400000);
  EXPECT_EQ(c.gc_grace_ms, 0u);
  Status st = load_config(write("io_thread: 3\n"), &c);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("io_thread"), std::string::npos);
  EXPECT_EQ(load_config(write("gc:\n  max_bytes: lots\n"), &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(load_config(d.sub("missing.yaml"), &c).code(), Code::kIOError);
}

TEST(Dtype, KnownValues) {
  // bf16 -> fp16 of exactly representable values.
  const uint16_t bf[] = {0x3F80 /*1*/, 0xC020 /*-2.5*/, 0x3F00 /*0.5*/, 0x0000, 0x4780 /*65536*/,
                         0x3DCD /*0.10009765625*/};
  const uint16_t want[] = {0x3C00, 0xC100, 0x3800, 0x0000, 0x7C00 /*overflow: inf*/, 0x2E68};
  uint16_t out[6];
  convert_dtype(bf, DType::kBF16, out, DType::kFP16, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], want[i]) << i;
  uint16_t back[6];
  convert_dtype(want, DType::kFP16, back, DType::kBF16, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], bf[i]) << i;
  // fp32 -> fp16 with round-to-nearest-even and subnormals.
  const float f[] = {1.0f / 3.0f, 6.0e-8f, -0.0f, 65504.0f, 1.0009765625f /* 1 + 2^-10 */};
  uint16_t h[5];
  convert_dtype(f, DType::kFP32, h, DType::kFP16, 5);
  EXPECT_EQ(h[0], 0x3555);
  EXPECT_EQ(h[1], 0x0001);  // smallest subnormal 2^-24 = 5.96e-8
  EXPECT_EQ(h[2], 0x8000);
  EXPECT_EQ(h[3], 0x7BFF);
  EXPECT_EQ(h[4], 0x3C01);
  for (uint32_t v = 0; v < 0x7C00; v += 37) {  // fp16 -> fp32 -> fp16 round trip
    uint16_t x = static_cast<uint16_t>(v), y;
    float t = f16_to_f32(x);
    y = f32_to_f16(t);
    EXPECT_EQ(x, y) << v;
  }
}
