// lib/admin/events.cc: publish_events (ucm/kv_event_publisher.h): the follower's events on a ZeroMQ
// PUB socket with a ROUTER replay socket, framed as vLLM 0.32's ZmqEventPublisher frames them
// (vllm/distributed/kv_events.py): (topic, 8-byte big-endian sequence, msgpack KVEventBatch).
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <deque>
#include <thread>
#include <cerrno>

#include "events_follow.h"
#include "events_wire.h"
#include "ucm/kv_event_publisher.h"
#include "ucm/kv_event_blocks.h"

namespace ucm::admin {
namespace {

using Clock = std::chrono::steady_clock;

std::string be64(int64_t v) {
  std::string s(8, '\0');
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xFF);
  return s;
}

bool is_bind_endpoint(const std::string& ep) {  // vLLM's ZmqEventPublisher._is_bind_endpoint
  return ep.find('*') != std::string::npos || ep.find("::") != std::string::npos || ep.rfind("ipc://", 0) == 0 ||
         ep.rfind("inproc://", 0) == 0;
}

class Publisher {
 public:
  Publisher(const EventsOptions& o, const std::string& medium) : o_(o), medium_(medium), ctx_(1) {}

  Status open(std::string* pub_ep, std::string* replay_ep) {
    try {
      // XPUB: a PUB socket that also hands over the subscriptions (verbose: every one, also a
      // topic another subscriber has), so a subscriber that comes late can get the snapshot.
      pub_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
      pub_.set(zmq::sockopt::xpub_verbose, 1);
      pub_.set(zmq::sockopt::sndhwm, static_cast<int>(o_.hwm));
      pub_.set(zmq::sockopt::linger, 1000);
      if (is_bind_endpoint(o_.endpoint)) {
        pub_.bind(o_.endpoint);
        *pub_ep = pub_.get(zmq::sockopt::last_endpoint);
      } else {
        pub_.connect(o_.endpoint);
        *pub_ep = o_.endpoint;
      }
    } catch (const zmq::error_t& e) {
      return Status::IOError("events: cannot open the PUB socket on " + o_.endpoint + ": " + e.what());
    }
    if (o_.replay_endpoint.empty()) return Status::OK();
    try {
      replay_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      replay_.set(zmq::sockopt::linger, 1000);
      replay_.bind(o_.replay_endpoint);
      *replay_ep = replay_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return Status::IOError("events: cannot bind the replay socket on " + o_.replay_endpoint + ": " + e.what());
    }
    return Status::OK();
  }

  /// Publishes events in batches of at most max_blocks_per_batch blocks.
  void publish(const std::vector<KvEvent>& events, EventsReport* rep) {
    size_t begin = 0;
    while (begin < events.size()) {
      size_t end = begin, blocks = 0;
      while (end < events.size() && (end == begin || blocks + events[end].hashes.size() <= o_.max_blocks_per_batch))
        blocks += std::max<size_t>(1, events[end++].hashes.size());
      const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::string payload = encode_kv_event_batch(ts, events, begin, end, medium_, o_.data_parallel_rank);
      const int64_t seq = static_cast<int64_t>(seq_++);
      // zmq::buffer keeps a pointer: the sequence frame's bytes must outlive the send (a temporary
      // be64() here dangled, and at -O3 the replay frames came out wrong).
      const std::string seq_bytes = be64(seq);
      std::array<zmq::const_buffer, 3> frames = {zmq::buffer(o_.topic), zmq::buffer(seq_bytes), zmq::buffer(payload)};
      (void)zmq::send_multipart(pub_, frames);
      buffer_.emplace_back(seq, std::move(payload));
      while (buffer_.size() > o_.buffer_batches) buffer_.pop_front();
      rep->batches += 1;
      rep->events += end - begin;
      begin = end;
      serve_replay(0, rep);  // a long snapshot must not starve replay requests
    }
  }

  /// Reads the subscription messages that reached the PUB socket; counts, and returns true for,
  /// subscriptions whose prefix matches the topic (their subscriber receives our messages).
  bool take_subscriptions(EventsReport* rep) {
    bool any = false;
    zmq::message_t m;
    while (pub_.recv(m, zmq::recv_flags::dontwait)) {
      const auto* d = static_cast<const char*>(m.data());
      if (m.size() < 1 || d[0] != 1) continue;  // 0: an unsubscription
      const std::string prefix(d + 1, m.size() - 1);
      if (o_.topic.compare(0, prefix.size(), prefix) != 0) continue;
      ++rep->subscriptions;
      any = true;
    }
    return any;
  }

  /// Answers replay requests for up to `wait_ms`.
  void serve_replay(long wait_ms, EventsReport* rep) {
    if (!replay_) {
      const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
      while (Clock::now() < until && !(o_.stop && o_.stop->load()))
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long>(wait_ms, 50)));
      return;
    }
    const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
    do {
      if (o_.stop && o_.stop->load()) return;
      zmq::pollitem_t item{replay_.handle(), 0, ZMQ_POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      std::vector<zmq::message_t> req;
      try {
        if (zmq::poll(&item, 1, std::chrono::milliseconds(std::max<long>(0, left.count()))) <= 0) continue;
        if (!zmq::recv_multipart(replay_, std::back_inserter(req), zmq::recv_flags::dontwait)) continue;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) return;  // SIGTERM / SIGINT: the caller sees the stop flag
        throw;
      }
      if (req.size() != 3 || req[2].size() != 8) continue;  // (identity, "", start seq), as vLLM
      uint64_t start = 0;
      for (size_t i = 0; i < 8; ++i) start = (start << 8) | static_cast<const uint8_t*>(req[2].data())[i];
      ++rep->replay_requests;
      for (const auto& [seq, payload] : buffer_) {
        if (static_cast<uint64_t>(seq) < start) continue;
        const std::string seq_bytes = be64(seq);  // outlives the send (zmq::buffer keeps a pointer)
        std::array<zmq::const_buffer, 5> f = {zmq::buffer(req[0].data(), req[0].size()), zmq::const_buffer(),
                                              zmq::buffer(o_.topic), zmq::buffer(seq_bytes), zmq::buffer(payload)};
        (void)zmq::send_multipart(replay_, f);
      }
      const std::string end_seq = be64(-1);
      std::array<zmq::const_buffer, 5> end = {zmq::buffer(req[0].data(), req[0].size()), zmq::const_buffer(),
                                              zmq::const_buffer(), zmq::buffer(end_seq), zmq::const_buffer()};
      (void)zmq::send_multipart(replay_, end);
    } while (Clock::now() < until);
  }

 private:
  const EventsOptions& o_;
  std::string medium_;
  zmq::context_t ctx_;
  zmq::socket_t pub_, replay_;
  uint64_t seq_ = 0;
  std::deque<std::pair<int64_t, std::string>> buffer_;
};

}  // namespace

Status publish_events_impl(const std::string& store, const EventsOptions& opts, EventsReport* rep);

Status publish_events(const std::string& store, const EventsOptions& opts, EventsReport* rep) {
  try {
    return publish_events_impl(store, opts, rep);
  } catch (const zmq::error_t& e) {
    return Status::IOError(std::string("events: ZeroMQ: ") + e.what());
  }
}

Status publish_events_impl(const std::string& store, const EventsOptions& opts, EventsReport* rep) {
  const auto t0 = Clock::now();
  rep->store = store;
  rep->medium = opts.medium.empty() ? kv_event_medium(store) : opts.medium;
  if (opts.max_blocks_per_batch == 0) return Status::InvalidArgument("events: max blocks per batch must be >= 1");
  std::unique_ptr<StoreFollower> f;
  Status st = StoreFollower::Open(store, opts.ns, &f);
  if (!st.ok()) return st;
  Publisher pub(opts, rep->medium);
  st = pub.open(&rep->endpoint, &rep->replay_endpoint);
  if (!st.ok()) return st;
  if (opts.on_ready) opts.on_ready(rep->endpoint, rep->replay_endpoint);

  auto fill = [&] {
    const FollowStats& s = f->stats();
    rep->blocks_stored = s.blocks_stored;
    rep->blocks_removed = s.blocks_removed;
    rep->without_tokens = s.without_tokens;
    rep->unreadable = s.unreadable;
    rep->rescans = s.rescans;
    rep->shards = s.shards;
    rep->published = f->published();
    rep->blocks_resent = s.blocks_resent;
    rep->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Events go out every 256 (and at the end of each call): a snapshot is never held whole.
  f->set_sink([&](std::vector<KvEvent>* ev) {
    pub.publish(*ev, rep);
    ev->clear();
  }, 256);
  std::vector<KvEvent> events;
  if (opts.clear_on_start) {  // what a router knew of this publisher is stale
    events.emplace_back();
    events.back().kind = KvEvent::Kind::kCleared;
  }
  st = f->snapshot(&events, opts.max_blocks_per_batch);
  if (!st.ok()) return st;
  pub.publish(events, rep);
  rep->snapshot_blocks = f->stats().blocks_stored;
  fill();
  if (opts.progress)
    opts.progress("snapshot: " + std::to_string(rep->snapshot_blocks) + " blocks in " + std::to_string(rep->batches) +
                  " batches on " + rep->endpoint);

  auto last_progress = Clock::now();
  // Any subscription, also one that came while the snapshot went out, gets the blocks again.
  Clock::time_point last_resend{};
  bool resend_due = false;
  while (!(opts.stop && opts.stop->load())) {
    if (opts.run_for_ms && Clock::now() - t0 >= std::chrono::milliseconds(opts.run_for_ms)) break;
    pub.serve_replay(opts.poll_ms, rep);
    resend_due = (pub.take_subscriptions(rep) && opts.resend_min_ms > 0) || resend_due;
    events.clear();
    st = f->poll(&events, opts.max_blocks_per_batch);
    if (st.ok() && resend_due && Clock::now() - last_resend >= std::chrono::milliseconds(opts.resend_min_ms)) {
      st = f->resend(&events, opts.max_blocks_per_batch);
      resend_due = false;
      last_resend = Clock::now();
      ++rep->resends;
    }
    if (!st.ok()) {
      fill();
      return st;
    }
    if (!events.empty()) pub.publish(events, rep);
    fill();
    if (opts.progress && Clock::now() - last_progress >= std::chrono::seconds(10)) {
      last_progress = Clock::now();
      opts.progress(std::to_string(rep->published) + " blocks published, +" + std::to_string(rep->blocks_stored) +
                    " / -" + std::to_string(rep->blocks_removed) + " so far, " + std::to_string(rep->batches) +
                    " batches");
    }
  }
  fill();
  return Status::OK();
}

}  // namespace ucm::admin
