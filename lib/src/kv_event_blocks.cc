// lib/src/kv_event_blocks.cc: the medium string of ucm's KV events (ucm/kv_event_blocks.h).
#include "ucm/kv_event_blocks.h"

#include <filesystem>

namespace ucm {

std::string kv_event_medium(const std::string& store_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(store_path.empty() ? "." : store_path), ec);
  if (ec) p = fs::path(store_path);
  p = p.lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "/srv/kv/corpus/" -> "/srv/kv/corpus"
  std::string name = p.filename().string();
  return "ucm:" + (name.empty() ? std::string("/") : name);
}

}  // namespace ucm
