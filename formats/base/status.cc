// formats/base/status.cc: ucm::Status (ucm/status.h).
#include "ucm/status.h"

#include <cerrno>
#include <cstring>

namespace ucm {

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kCorruption: return "CORRUPTION";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kIOError: return "IO_ERROR";
    case Code::kBusy: return "BUSY";
    case Code::kVersion: return "VERSION";
    case Code::kNotSupported: return "NOT_SUPPORTED";
    case Code::kNoSpace: return "NO_SPACE";
    case Code::kPending: return "PENDING";
    case Code::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status Status::FromErrno(int err, std::string_view what) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof buf);  // GNU variant returns the text
  std::string msg = std::string(what) + ": " + text;
  if (err == ENOSPC || err == EDQUOT) return NoSpace(msg + "; free disk space (e.g. `ucm gc --max-bytes`) and retry");
  if (err == EACCES || err == EPERM) return IOError(msg + "; check permissions");
  return IOError(msg);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(code_name(code_)) + ": " + msg_;
}

}  // namespace ucm
