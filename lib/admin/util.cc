// Parsing helpers, exit codes and the YAML store config (ucm/admin.h).
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <set>
#include <string>

#include "ucm/admin.h"

namespace ucm::admin {

int exit_code(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return kExitOk;
    case Code::kCorruption: return kExitCorruption;
    case Code::kBusy: return kExitBusy;
    case Code::kVersion: return kExitVersion;
    default: return kExitError;
  }
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Parses a non-negative decimal number ("12", "1.5") at the start of s; returns chars used (0 = none).
size_t parse_number(const std::string& s, size_t pos, long double* out) {
  size_t i = pos;
  bool digits = false;
  long double v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    v = v * 10 + (s[i] - '0');
    ++i;
    digits = true;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    long double scale = 0.1L;
    bool frac = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      v += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
      frac = true;
    }
    if (!frac) return 0;
  }
  if (!digits) return 0;
  *out = v;
  return i - pos;
}

// parse_bytes: the bytes `s` (trimmed, not empty, not negative) stands for; "" or why not.
std::string bytes_of(const std::string& s, long double* out) {
  long double v = 0;
  size_t n = parse_number(s, 0, &v);
  if (n == 0) return "no number";
  std::string unit = lower(trim(s.substr(n)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  long double mult = 1;
  if (!unit.empty()) {
    const std::string units = "kmgtp";
    size_t p = units.find(unit[0]);
    if (p == std::string::npos) return "unknown unit";
    bool binary = false;
    if (unit.size() == 2 && unit[1] == 'i') binary = true;
    else if (unit.size() != 1) return "unknown unit";
    mult = std::pow(binary ? 1024.0L : 1000.0L, static_cast<long double>(p + 1));
  }
  *out = v * mult;
  return "";
}

// parse_duration: the milliseconds `s` (trimmed, lower case, not empty, not negative) stands for;
// "" or why not.
std::string ms_of(const std::string& s, long double* out) {
  long double total = 0;
  size_t pos = 0;
  bool any = false;
  while (pos < s.size()) {
    long double v = 0;
    size_t n = parse_number(s, pos, &v);
    if (n == 0) return "expected a number at position " + std::to_string(pos);
    pos += n;
    size_t u = pos;
    while (u < s.size() && std::isalpha(static_cast<unsigned char>(s[u]))) ++u;
    std::string unit = s.substr(pos, u - pos);
    pos = u;
    long double mult;
    if (unit.empty()) {
      if (any || pos != s.size()) return "missing unit";
      mult = 1000;  // bare number: seconds
    } else if (unit == "ms") mult = 1;
    else if (unit == "s") mult = 1000;
    else if (unit == "m" || unit == "min") mult = 60e3L;
    else if (unit == "h") mult = 3600e3L;
    else if (unit == "d") mult = 86400e3L;
    else if (unit == "w") mult = 7 * 86400e3L;
    else return "unknown unit '" + unit + "'";
    total += v * mult;
    any = true;
  }
  *out = total;
  return "";
}

// A size or duration as text: `s` (`in` trimmed, and lower case for a duration) must not be empty
// or negative; `amount` reads it, and the result is rounded to a uint64_t. An error says
// "invalid <what> '<in>': <why>; <hint>".
Status parse_amount(const std::string& in, const std::string& s, const char* what, const char* hint,
                    std::string (*amount)(const std::string&, long double*), uint64_t* out) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("invalid " + std::string(what) + " '" + in + "': " + why + "; " + hint);
  };
  if (s.empty()) return bad("empty");
  if (s[0] == '-') return bad("negative");
  long double v = 0;
  const std::string why = amount(s, &v);
  if (!why.empty()) return bad(why);
  long double r = std::floor(v + 0.5L);
  if (r >= 18446744073709551615.0L) return bad("too large");
  *out = static_cast<uint64_t>(r);
  return Status::OK();
}

}  // namespace

Status parse_bytes(const std::string& in, uint64_t* out) {
  return parse_amount(in, trim(in), "byte size",
                      "use e.g. 1000, 512MiB, 10G, 1.5TiB (K/M/G/T/P = 1000^n, Ki/Mi/Gi/Ti/Pi = 1024^n)", bytes_of,
                      out);
}

Status parse_duration(const std::string& in, uint64_t* out_ms) {
  return parse_amount(in, lower(trim(in)), "duration",
                      "use e.g. 500ms, 45s, 15m, 12h, 30d, 1w, 1h30m (a bare number is seconds)", ms_of, out_ms);
}

Status load_config(const std::string& path, StoreConfig* out) {
  StoreConfig c;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::IOError("cannot read config file '" + path + "'; check the path");
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config '" + path + "' is not valid YAML: " + e.what());
  }
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status::InvalidArgument("config '" + path + "': key '" + key + "' " + why +
                                   " (see configs/store.yaml)");
  };
  if (root.IsNull()) {
    *out = c;
    return Status::OK();
  }
  if (!root.IsMap()) return bad("<root>", "must be a mapping");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "io_threads") {
        int64_t t = v.as<int64_t>();
        if (t < 1 || t > 1024) return bad(key, "must be in [1, 1024]");
        c.io_threads = static_cast<uint32_t>(t);
      } else if (key == "direct_io") {
        c.direct_io = v.as<bool>();
      } else if (key == "gc") {
        if (v.IsNull()) continue;
        if (!v.IsMap()) return bad(key, "must be a mapping");
        for (const auto& g : v) {
          const std::string gk = g.first.as<std::string>();
          const std::string full = "gc." + gk;
          if (g.second.IsNull()) continue;
          const std::string sv = g.second.as<std::string>();
          if (gk == "max_bytes") {
            uint64_t b;
            Status st = parse_bytes(sv, &b);
            if (!st.ok()) return bad(full, st.message());
            c.gc_max_bytes = b;
          } else if (gk == "max_age") {
            uint64_t ms;
            Status st = parse_duration(sv, &ms);
            if (!st.ok()) return bad(full, st.message());
            c.gc_max_age_ms = ms;
          } else if (gk == "grace") {
            uint64_t ms;
            Status st = parse_duration(sv, &ms);
            if (!st.ok()) return bad(full, st.message());
            c.gc_grace_ms = ms;
          } else if (gk == "compact_dead_ratio") {
            double r = g.second.as<double>();
            if (!(r > 0.0 && r <= 1.0)) return bad(full, "must be in (0, 1]");
            c.gc_compact_dead_ratio = r;
          } else {
            return bad(full, "is unknown (known: max_bytes, max_age, grace, compact_dead_ratio)");
          }
        }
      } else {
        return bad(key, "is unknown (known: io_threads, direct_io, gc)");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config '" + path + "': " + e.what());
  }
  *out = c;
  return Status::OK();
}

}  // namespace ucm::admin
