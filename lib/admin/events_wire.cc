// lib/admin/events_wire.cc: msgpack encoding of KV event batches (events_wire.h), with msgpack-c.
#define MSGPACK_NO_BOOST 1
#include "events_wire.h"

#include <msgpack.hpp>

namespace ucm::admin {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void str(Packer& p, const std::string& s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void hash(Packer& p, const BlockHash& h) {
  p.pack_bin(static_cast<uint32_t>(h.size()));
  p.pack_bin_body(reinterpret_cast<const char*>(h.data()), static_cast<uint32_t>(h.size()));
}

void hashes(Packer& p, const std::vector<BlockHash>& hs) {
  p.pack_array(static_cast<uint32_t>(hs.size()));
  for (const auto& h : hs) hash(p, h);
}

void event(Packer& p, const KvEvent& e, const std::string& medium) {
  switch (e.kind) {
    case KvEvent::Kind::kStored:
      p.pack_map(8);
      str(p, "type"), str(p, "BlockStored");
      str(p, "block_hashes"), hashes(p, e.hashes);
      str(p, "parent_block_hash");
      if (e.has_parent)
        hash(p, e.parent);
      else
        p.pack_nil();
      str(p, "token_ids");
      p.pack_array(static_cast<uint32_t>(e.tokens.size()));
      for (uint32_t t : e.tokens) p.pack_uint32(t);
      str(p, "block_size"), p.pack_uint32(e.block_size);
      str(p, "lora_id"), p.pack_nil();
      str(p, "medium"), str(p, medium);
      str(p, "lora_name"), p.pack_nil();
      break;
    case KvEvent::Kind::kRemoved:
      p.pack_map(3);
      str(p, "type"), str(p, "BlockRemoved");
      str(p, "block_hashes"), hashes(p, e.hashes);
      str(p, "medium"), str(p, medium);
      break;
    case KvEvent::Kind::kCleared:
      p.pack_map(1);
      str(p, "type"), str(p, "AllBlocksCleared");
      break;
  }
}

}  // namespace

std::string encode_kv_event_batch(double ts, const std::vector<KvEvent>& events, size_t begin, size_t end,
                                  const std::string& medium, int dp_rank) {
  msgpack::sbuffer buf;
  Packer p(buf);
  p.pack_array(dp_rank < 0 ? 2 : 3);
  p.pack_double(ts);
  p.pack_array(static_cast<uint32_t>(end - begin));
  for (size_t i = begin; i < end; ++i) event(p, events[i], medium);
  if (dp_rank >= 0) p.pack_int32(dp_rank);
  return std::string(buf.data(), buf.size());
}

}  // namespace ucm::admin
