// lib/src/r4_projection.cc: a namespace's r4_projection and creating a namespace with it
// (store_v1.md §4.3, §7.3). Built with -ffp-contract=off: no fused multiply-add may change the
// rounding of the QR (lib/CMakeLists.txt).
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "ucm/namespace_match.h"
#include "ucm/store.h"

namespace ucm {
namespace {

// Standard normals by Box-Muller in double from one mt19937_64 (store_v1.md §7.3).
class Gauss {
 public:
  explicit Gauss(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    constexpr double two_pi = 6.283185307179586476925286766559;
    constexpr double inv53 = 1.0 / 9007199254740992.0;  // 2^-53
    const double u1 = double((rng_() >> 11) + 1) * inv53;  // (0, 1]
    const double u2 = double(rng_() >> 11) * inv53;        // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(two_pi * u2);
    have_spare_ = true;
    return r * std::cos(two_pi * u2);
  }

 private:
  std::mt19937_64 rng_;
  bool have_spare_ = false;
  double spare_ = 0;
};

// Applies H = I - tau v v^T (v = [1; a[i+1.., i]], rows i..n-1) from the left to columns
// c0..n-1 of the n x n row-major matrix a (LAPACK dlarf, side 'L').
void apply_reflector(std::vector<double>& a, size_t n, size_t i, double tau, size_t c0) {
  if (tau == 0) return;
  for (size_t c = c0; c < n; ++c) {
    double w = a[i * n + c];
    for (size_t r = i + 1; r < n; ++r) w += a[r * n + i] * a[r * n + c];
    w *= tau;
    a[i * n + c] -= w;
    for (size_t r = i + 1; r < n; ++r) a[r * n + c] -= a[r * n + i] * w;
  }
}

// Q of the QR of the n x n row-major matrix a (Householder: LAPACK dgeqr2 then dorg2r), with
// its columns multiplied by the sign of R's diagonal (+1 for 0): the Haar-distributed Q.
std::vector<double> orthogonal_q(std::vector<double> a, size_t n) {
  std::vector<double> tau(n, 0.0), sign(n, 1.0);
  for (size_t i = 0; i < n; ++i) {  // dgeqr2: dlarfg, then the reflector on the columns right of i
    double xnorm2 = 0;
    for (size_t r = i + 1; r < n; ++r) xnorm2 += a[r * n + i] * a[r * n + i];
    const double alpha = a[i * n + i];
    if (xnorm2 == 0) {
      tau[i] = 0;
    } else {
      const double norm = std::hypot(alpha, std::sqrt(xnorm2));
      const double beta = alpha >= 0 ? -norm : norm;
      tau[i] = (beta - alpha) / beta;
      const double scale = 1.0 / (alpha - beta);
      for (size_t r = i + 1; r < n; ++r) a[r * n + i] *= scale;
      a[i * n + i] = beta;
    }
    if (a[i * n + i] < 0) sign[i] = -1.0;  // R's diagonal
    apply_reflector(a, n, i, tau[i], i + 1);
  }
  for (size_t i = n; i-- > 0;) {  // dorg2r: Q = H(0) ... H(n-1) applied to I, last first
    if (i + 1 < n) {
      a[i * n + i] = 1.0;
      apply_reflector(a, n, i, tau[i], i + 1);
    }
    for (size_t r = i + 1; r < n; ++r) a[r * n + i] *= -tau[i];
    a[i * n + i] = 1.0 - tau[i];
    for (size_t r = 0; r < i; ++r) a[r * n + i] = 0.0;
  }
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < n; ++c) a[r * n + c] *= sign[c];
  return a;
}

Status extra_u64(const nlohmann::json& extra, const char* key, uint64_t dflt, uint64_t* out) {
  *out = dflt;
  if (!extra.is_object() || !extra.contains(key)) return Status::OK();
  if (!extra[key].is_number_unsigned())
    return Status::InvalidArgument(std::string("namespace extra.") + key + " must be an unsigned integer, not " +
                                   extra[key].dump());
  *out = extra[key].get<uint64_t>();
  return Status::OK();
}

}  // namespace

std::vector<float> r4_projection(uint32_t L, uint32_t H, uint32_t D, uint32_t B, uint64_t seed) {
  std::vector<float> P(size_t{L} * H * D * B);
  Gauss gauss(seed);
  const uint32_t nblk = D ? (B + D - 1) / D : 0;
  std::vector<double> g(size_t{D} * D);
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t c = 0; c < nblk; ++c) {
        for (double& x : g) x = gauss();
        const std::vector<double> q = orthogonal_q(g, D);
        float* p = P.data() + (size_t{l} * H + h) * D * B;
        for (uint32_t j = c * D; j < std::min(B, (c + 1) * D); ++j)
          for (uint32_t d = 0; d < D; ++d) p[size_t{d} * B + j] = static_cast<float>(q[size_t{d} * D + (j - c * D)]);
      }
  return P;
}

Status create_namespace(Store* store, const NamespaceDesc& want, NamespaceId* id, std::vector<float>* proj_out) {
  const auto extra = nlohmann::json::parse(want.extra_json, nullptr, false);
  uint64_t bits = 0, seed = 0;
  UCM_RETURN_IF_ERROR(extra_u64(extra, "hash_bits", 0, &bits));
  UCM_RETURN_IF_ERROR(extra_u64(extra, "projection_seed", 0, &seed));
  if (bits > (1u << 16)) return Status::InvalidArgument("namespace extra.hash_bits " + std::to_string(bits) + " is too large");
  NamespaceId ns{};
  Status st = store->register_namespace(want, &ns);
  if (!st.ok()) return Status(st.code(), "registering namespace " + want.display_name() + ": " + st.message());
  std::vector<float> proj;
  if (bits > 0) {
    proj = r4_projection(want.num_layers, want.num_kv_heads, want.head_dim, uint32_t(bits), seed);
    std::string have;
    const Status g = store->get_attachment(ns, "r4_projection", &have);
    if (g.ok()) {
      bool same = have.size() == proj.size() * sizeof(float);
      for (size_t i = 0; same && i < proj.size(); ++i) {
        float x;
        std::memcpy(&x, have.data() + i * sizeof(float), sizeof x);
        same = std::fabs(double(x) - double(proj[i])) <= 1e-6;
        proj[i] = x;  // the stored one stays: the namespace's blocks were encoded with it
      }
      if (!same)
        return Status::Corruption("namespace " + want.display_name() +
                                  ": stored r4_projection differs from the one its projection_seed generates");
    } else if (g.code() == Code::kNotFound) {
      st = store->put_attachment(ns, "r4_projection", proj.data(), proj.size() * sizeof(float));
      if (!st.ok()) return Status(st.code(), "storing r4_projection: " + st.message());
    } else {
      return g;
    }
  }
  *id = ns;
  if (proj_out) *proj_out = std::move(proj);
  return Status::OK();
}

}  // namespace ucm
