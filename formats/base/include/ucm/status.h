// ucm/status.h: the result type of every fallible libucm C++ call.
#pragma once
#include <string>
#include <string_view>
#include <utility>

namespace ucm {

/// Error codes. Numeric values equal the C ABI's UCM_E_* codes (ucm/ucm.h) and never change.
enum class Code : int {
  kOk = 0,
  kNotFound = 1,         ///< block / namespace / file absent (a miss)
  kCorruption = 2,       ///< checksum or structure mismatch; the bytes are not served
  kInvalidArgument = 3,  ///< caller error: bad path, bad hash string, head range out of bounds...
  kIOError = 4,          ///< the OS refused (errno text in the message)
  kBusy = 5,             ///< another writer holds the store (message names the holder)
  kVersion = 6,          ///< store format newer than this ucm supports
  kNotSupported = 7,     ///< a valid request this build cannot serve
  kNoSpace = 8,          ///< disk full (ENOSPC / EDQUOT)
  kPending = 9,          ///< async task not finished yet
  kInternal = 10,        ///< a bug in ucm
};

const char* code_name(Code c);

/// A call's outcome: OK, or a Code with a message that says what was wrong and what to do.
/// [[nodiscard]]: ignoring a returned Status is a compile error (-Werror); write `(void)call();`
/// where ignoring it is deliberate, and say why.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code c, std::string msg) : code_(c), msg_(std::move(msg)) {}
  static Status OK() { return {}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status Version(std::string m) { return {Code::kVersion, std::move(m)}; }
  static Status NotSupported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status Pending(std::string m) { return {Code::kPending, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  /// IOError or NoSpace from an errno value, with `what` (e.g. "write data/00000003.ucmd") prefixed.
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  /// "CORRUPTION: <message>" or "OK".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

}  // namespace ucm

/// Returns the Status of `expr` from the enclosing function when it is not OK.
#define UCM_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::ucm::Status ucm_status_ = (expr);        \
    if (!ucm_status_.ok()) return ucm_status_; \
  } while (0)
