// lib/src/file_roller.cc: see ucm/core/file_roller.h.
#include "ucm/core/file_roller.h"

namespace ucm {

Status FileRoller::get(uint64_t need, std::shared_ptr<ActiveFile>* af) {
  if (!active_ || active_->w->size() + need >= roll_bytes_) {
    uint32_t id = 0;
    Status s = index_->allocate_file_id(&id);
    if (!s.ok()) return s;
    auto nf = std::make_shared<ActiveFile>();
    s = fmt::DataFileWriter::Create(store_, id, &nf->w, format_version_);
    if (!s.ok()) return s;
    nf->rec.size = fmt::kPage;
    nf->rec.state = fmt::FileState::kActive;
    Index::Batch b;
    {
      std::lock_guard<std::mutex> c(*commit_mu_);
      if (active_) {
        active_->rec.state = fmt::FileState::kSealed;
        b.put_file(active_->w->file_id(), active_->rec);
      }
      b.put_file(id, nf->rec);
      s = index_->write(b, true);
    }
    if (!s.ok()) return s;
    active_ = std::move(nf);
  }
  *af = active_;
  return Status::OK();
}

}  // namespace ucm
