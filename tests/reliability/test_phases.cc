// The store's long paths called phase by phase (issue 25): StoreReader::read_verified and dump's
// phases (StoreWriter; lib/src/include/ucm/core/store_reader.h, store_writer.h), and
// rebuild-index's (lib/admin/rebuild.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "rebuild.h"
#include "rel_common.h"
#include "ucm/core/store_impl.h"
#include "ucm/store.h"

namespace {

struct Fixture {
  std::string dir = rel::make_temp_dir("ucm-rel-phases");
  std::string path = dir + "/store";
  ucm::NamespaceId ns{};
  std::unique_ptr<ucm::Store> st;
  ~Fixture() {
    st.reset();
    rel::rm_rf(dir);
  }
  void open_and_dump(uint64_t n) {
    ASSERT_TRUE(rel::open_rw(path, &st).ok());
    ASSERT_TRUE(st->register_namespace(rel::test_desc("keep"), &ns).ok());
    ucm::Status s = rel::dump_batch(st.get(), ns, 0, n);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ucm::detail::StoreImpl& impl() { return dynamic_cast<ucm::detail::StoreImpl&>(*st); }
};

TEST(ReliabilityPhases, ReadVerifiedChecksLengthReprAndPayload) {
  Fixture f;
  f.open_and_dump(3);
  ucm::fmt::BlockRecord rec;
  ucm::fmt::AlignedBuffer buf;
  const ucm::BlockHash h = rel::block_hash(f.ns, 1);
  using P = ucm::detail::StoreReader::Payload;
  ucm::Status s = f.impl().reader().read_verified(f.ns, h, P::kKV, rel::kPayload, &rec, &buf);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rec.kv_length, rel::kPayload);
  EXPECT_TRUE(rel::check_payload(h, buf.data() + ucm::fmt::kPage));
  EXPECT_EQ(f.impl().reader().read_verified(f.ns, h, P::kKV, rel::kPayload + 1, &rec, &buf).code(),
            ucm::Code::kCorruption);
  EXPECT_EQ(f.impl().reader().read_verified(f.ns, h, P::kRepr, 0, &rec, &buf).code(), ucm::Code::kNotFound);  // no repr
  EXPECT_EQ(f.impl().reader().read_verified(f.ns, rel::block_hash(f.ns, 99), P::kKV, 0, &rec, &buf).code(),
            ucm::Code::kNotFound);
}

TEST(ReliabilityPhases, DumpCheckAndMarkPresent) {
  Fixture f;
  f.open_and_dump(2);
  std::vector<uint8_t> pay = rel::payload(rel::block_hash(f.ns, 5));
  std::vector<ucm::DumpItem> items(4);
  for (size_t k = 0; k < items.size(); ++k) {
    items[k].hash = rel::block_hash(f.ns, k == 3 ? 5 : k + 4 * (k == 2));  // 0, 1 present; 6; 5
    items[k].parent = ucm::root_hash(f.ns);
    items[k].token_count = rel::kBlock;
    items[k].kv = pay.data();
  }
  items.push_back(items[3]);  // a repeat within the task
  ucm::NamespaceDesc d;
  ASSERT_TRUE(f.impl().writer()->dump_check(f.ns, items.data(), items.size(), &d).ok());
  EXPECT_EQ(d.block_size, rel::kBlock);
  ucm::detail::DumpState ds;
  ds.ns = f.ns;
  ds.desc = d;
  ds.items = items;
  ds.skip.assign(items.size(), false);
  f.impl().writer()->dump_mark_present(&ds);
  EXPECT_EQ(ds.skip, (std::vector<bool>{true, true, false, false, true}));
  items[2].token_count = rel::kBlock - 1;  // a partial block is refused
  EXPECT_EQ(f.impl().writer()->dump_check(f.ns, items.data(), items.size(), &d).code(), ucm::Code::kInvalidArgument);
}

TEST(ReliabilityPhases, RebuildScanKeepsValidRecordsAndCountsACorruptOne) {
  Fixture f;
  f.open_and_dump(4);
  ucm::BlockInfo bi;
  ASSERT_TRUE(f.st->get_block(f.ns, rel::block_hash(f.ns, 2), &bi).ok());
  f.st.reset();
  // One payload byte of block 2 flipped: its record fails its checksum.
  const std::string file = ucm::fmt::data_file_path(f.path, bi.kv_file);
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t off = off_t(bi.kv_offset + ucm::fmt::kPage + 10);
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, off), 1);
  b ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &b, 1, off), 1);
  ::close(fd);

  namespace rb = ucm::admin::rebuild;
  ucm::admin::ProgressFn none;
  ucm::admin::Progress prog(none);
  ucm::admin::BuildReport rep;
  rb::Scan scan;
  ucm::Status s = rb::scan_data_files(f.path, &prog, &scan, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.corrupt_records, 1u);
  EXPECT_EQ(scan.kv.size(), 3u);
  EXPECT_EQ(scan.kv.count(ucm::admin::bkey(f.ns, rel::block_hash(f.ns, 2))), 0u);
  const auto descs = rb::namespaces_from_records(scan, &rep);
  ASSERT_EQ(descs.size(), 1u);
  EXPECT_EQ(descs.begin()->first, f.ns);
}

}  // namespace
