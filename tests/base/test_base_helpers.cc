// ucm_base's shared helpers: ucm/hex.h, ucm/half.h, ucm/strings.h, ucm/clock.h, ucm/process.h, ucm/fs.h.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "ucm/clock.h"
#include "ucm/fs.h"
#include "ucm/half.h"
#include "ucm/hex.h"
#include "ucm/process.h"
#include "ucm/strings.h"
#include "ucm/types.h"

namespace {

TEST(BaseHex, EncodesEveryByteLowerCaseInOrder) {
  const uint8_t b[] = {0x00, 0x0f, 0xa5, 0xff, 0x10};
  EXPECT_EQ(ucm::hex_encode(b, sizeof b), "000fa5ff10");
  EXPECT_EQ(ucm::hex_encode(b, 0), "");
  ucm::BlockHash h{};
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint8_t(i * 17);
  EXPECT_EQ(ucm::to_hex(h), "00112233445566778899aabbccddeeff");
  ucm::BlockHash back{};
  ASSERT_TRUE(ucm::parse_hex16(ucm::to_hex(h), &back).ok());
  EXPECT_EQ(back, h);
}

TEST(BaseHalf, KnownPatternsBothWays) {
  EXPECT_EQ(ucm::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(ucm::bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(ucm::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(ucm::f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(ucm::f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(ucm::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(ucm::f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(ucm::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(ucm::f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(ucm::f16_to_f32(0x7e00)));
  EXPECT_EQ(ucm::f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(ucm::f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(ucm::f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(ucm::f32_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  EXPECT_EQ(ucm::f32_to_bf16(std::numeric_limits<float>::quiet_NaN()) & 0x7fc0, 0x7fc0);
}

TEST(BaseHalf, EveryFiniteHalfAndBf16RoundTrips) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t x = uint16_t(v);
    if ((x & 0x7c00) != 0x7c00) {
      EXPECT_EQ(ucm::f32_to_f16(ucm::f16_to_f32(x)), x) << v;
    }
    if ((x & 0x7f80) != 0x7f80) {
      EXPECT_EQ(ucm::f32_to_bf16(ucm::bf16_to_f32(x)), x) << v;
    }
  }
}

TEST(BaseStrings, SplitCommaKeepsFieldsAndDropsOnlyTheTrailingEmptyOne) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ucm::split_comma("0,1,12"), (V{"0", "1", "12"}));
  EXPECT_EQ(ucm::split_comma("a,,b"), (V{"a", "", "b"}));
  EXPECT_EQ(ucm::split_comma(",a"), (V{"", "a"}));
  EXPECT_EQ(ucm::split_comma("a,"), (V{"a"}));
  EXPECT_EQ(ucm::split_comma(" a , b"), (V{" a ", " b"}));
  EXPECT_TRUE(ucm::split_comma("").empty());
}

TEST(BaseClock, NowMsIsTheSystemClockAndIsoTimeIsUtc) {
  const uint64_t a = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  const uint64_t n = ucm::now_ms();
  EXPECT_GE(n, a);
  EXPECT_LT(n - a, 5000u);
  EXPECT_EQ(ucm::iso_time(1700000000123ull), "2023-11-14T22:13:20Z");
  EXPECT_EQ(ucm::iso_time(1700000000123ull, true), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(ucm::iso_time(0, true), "1970-01-01T00:00:00.000Z");
}

TEST(BaseClock, SteadyMsIsTheMonotonicClock) {
  const int64_t a = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
  const int64_t s = ucm::steady_ms();
  EXPECT_GE(s, a);
  EXPECT_LT(s - a, 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(ucm::steady_ms() - s, 19);
}

TEST(BaseProcess, PidAliveSeesThisProcessAndNotAReapedChild) {
  EXPECT_TRUE(ucm::pid_alive(long(::getpid())));
  EXPECT_FALSE(ucm::pid_alive(0));
  EXPECT_FALSE(ucm::pid_alive(-1));
  const pid_t c = ::fork();
  ASSERT_GE(c, 0);
  if (c == 0) ::_exit(0);
  int st = 0;
  ASSERT_EQ(::waitpid(c, &st, 0), c);
  EXPECT_FALSE(ucm::pid_alive(long(c)));  // reaped: gone (pids are not reused this fast)
}

}  // namespace

namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(p, ec);
  fs::create_directories(p);
  return p;
}
}  // namespace

// remove_tree against std::filesystem::remove_all on the same trees (both libstdc++'s here).
TEST(RemoveTree, RemovesWhatRemoveAllRemovesAndCountsAlike) {
  for (int variant = 0; variant < 2; ++variant) {
    const fs::path root = fresh_dir("ucm-remove-tree");
    const fs::path outside = fresh_dir("ucm-remove-tree-outside");
    std::ofstream(outside / "kept") << "k";
    fs::create_directories(root / "a" / "b" / "c");
    fs::create_directories(root / "empty");
    for (int i = 0; i < 40; ++i) std::ofstream(root / "a" / ("f" + std::to_string(i))) << i;
    std::ofstream(root / "a" / "b" / "c" / "deep") << "d";
    fs::create_symlink(outside, root / "a" / "link_to_dir");      // removed, not followed
    fs::create_symlink(root / "missing", root / "dangling");       // removed
    std::error_code ec;
    const uintmax_t n = variant == 0 ? ucm::remove_tree(root, ec) : fs::remove_all(root, ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(n, 48u) << "variant " << variant;  // root, a, b, c, empty; 40 files + deep; 2 links
    EXPECT_FALSE(fs::exists(fs::symlink_status(root)));
    EXPECT_TRUE(fs::exists(outside / "kept"));
    fs::remove_all(outside);
  }
}

TEST(RemoveTree, MissingPathFileAndLinkAtTheTop) {
  const fs::path root = fresh_dir("ucm-remove-tree-top");
  std::error_code ec;
  EXPECT_EQ(ucm::remove_tree(root / "nope", ec), 0u);
  EXPECT_FALSE(ec);
  std::ofstream(root / "file") << "x";
  EXPECT_EQ(ucm::remove_tree(root / "file", ec), 1u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(fs::exists(root / "file"));
  fs::create_directories(root / "target");
  std::ofstream(root / "target" / "t") << "t";
  fs::create_directory_symlink(root / "target", root / "link");
  EXPECT_EQ(ucm::remove_tree(root / "link", ec), 1u);  // the link itself
  EXPECT_FALSE(ec);
  EXPECT_TRUE(fs::exists(root / "target" / "t"));
  EXPECT_EQ(ucm::remove_tree(root, ec), 3u);
  EXPECT_FALSE(ec);
}

TEST(RemoveTree, AFailureSetsTheError) {
  const fs::path root = fresh_dir("ucm-remove-tree-err");
  std::ofstream(root / "file") << "x";
  std::error_code ec;
  EXPECT_EQ(ucm::remove_tree(root / "file" / "below", ec), 0u);  // a file as a directory
  EXPECT_EQ(ec, std::errc::not_a_directory) << ec.message();
  EXPECT_TRUE(fs::exists(root / "file"));
  EXPECT_EQ(ucm::remove_tree(root, ec), 2u);
  EXPECT_FALSE(ec);
}
