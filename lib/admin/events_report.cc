// lib/admin/events_report.cc: EventsReport as JSON and text, and publish_events where ucm was
// built without libzmq / cppzmq / msgpack-c (UCM_HAVE_EVENTS unset).
#include <nlohmann/json.hpp>

#include <sstream>

#include "ucm/kv_event_publisher.h"

namespace ucm::admin {

std::string EventsReport::to_json() const {
  nlohmann::ordered_json j;
  j["store"] = store;
  j["medium"] = medium;
  j["endpoint"] = endpoint;
  j["replay_endpoint"] = replay_endpoint;
  j["batches"] = batches;
  j["events"] = events;
  j["snapshot_blocks"] = snapshot_blocks;
  j["blocks_stored"] = blocks_stored;
  j["blocks_removed"] = blocks_removed;
  j["published"] = published;
  j["without_tokens"] = without_tokens;
  j["unreadable"] = unreadable;
  j["rescans"] = rescans;
  j["shards"] = shards;
  j["replay_requests"] = replay_requests;
  j["subscriptions"] = subscriptions;
  j["resends"] = resends;
  j["blocks_resent"] = blocks_resent;
  j["seconds"] = seconds;
  return j.dump();
}

std::string EventsReport::to_text() const {
  std::ostringstream o;
  o << "published        " << batches << " batches (" << events << " events) on " << endpoint
    << (replay_endpoint.empty() ? std::string(", no replay") : ", replay " + replay_endpoint) << ", medium " << medium
    << "\n";
  o << "blocks           " << snapshot_blocks << " in the snapshot; " << blocks_stored << " stored, " << blocks_removed
    << " removed in all; " << published << " published at the end\n";
  o << "not published    " << without_tokens << " blocks without token ids, " << unreadable << " unreadable\n";
  o << "store            " << shards << (shards == 1 ? " shard" : " shards") << ", " << rescans << " rescans; "
    << replay_requests << " replay requests; " << seconds << " s\n";
  o << "subscribers      " << subscriptions << " subscriptions; " << resends << " snapshots sent again (" << blocks_resent
    << " blocks)\n";
  return o.str();
}

#ifndef UCM_HAVE_EVENTS
Status publish_events(const std::string&, const EventsOptions&, EventsReport*) {
  return Status::NotSupported(
      "this ucm was built without libzmq, cppzmq and msgpack-c: install libzmq3-dev cppzmq-dev "
      "libmsgpack-cxx-dev (scripts/deps.sh does) and build again");
}
#endif

}  // namespace ucm::admin
