// pipelines/generate/eval_stats.h: the recall bookkeeping of `ucm eval retrieval` (eval.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ucm/generate/eval.h"
#include "ucm/status.h"

namespace ucm::generate {

/// The true block masses of one query (one step, one layer): m[h][j] for query head h < nh and
/// context block j < n; query head h belongs to KV head h / (nh / kv_heads).
struct QueryMasses {
  QueryMasses(const double* m, uint32_t nh, uint32_t kv_heads, size_t n) : m_(m), nh_(nh), kv_(kv_heads), n_(n) {}
  double at(uint32_t h, size_t j) const { return m_[size_t(h) * n_ + j]; }
  uint32_t q_heads() const { return nh_; }
  uint32_t kv_heads() const { return kv_; }
  uint32_t group() const { return nh_ / kv_; }
  size_t blocks() const { return n_; }

 private:
  const double* m_;
  uint32_t nh_, kv_;
  size_t n_;
};

/// Selects k blocks (k = 0: the policy's own count, PSA) and returns one set per KV head.
using SelectFn = std::function<Status(uint32_t k, std::vector<std::vector<uint32_t>>* sets)>;

class EvalStats {
 public:
  EvalStats(std::vector<double> budgets, std::vector<double> taus, uint32_t layers)
      : budgets_(std::move(budgets)), taus_(std::move(taus)), layers_(layers) {}
  /// The oracle's per-query-head recall with the k best blocks of its KV head (by the group's
  /// summed mass): [h][k], k in [0, n]. Computed once per query, passed to the calls below.
  using Curves = std::vector<std::vector<double>>;
  static Curves oracle_curves(const QueryMasses& qm);
  /// The oracle of one query: R* at every budget, and k_tau.
  void add_oracle(uint32_t layer, const QueryMasses& qm, const Curves& cur);
  /// One policy on one query: R at every budget and k_tau (top-k policies), or R and the block
  /// count at its threshold `tau` (psa).
  Status add_policy(const std::string& policy, bool psa, double tau, uint32_t layer, const QueryMasses& qm,
                    const Curves& cur, const SelectFn& select);
  /// Means per layer and per layer group into out->rows and out->k_tau.
  void finish(EvalRetrievalResult* out) const;

 private:
  struct Acc {
    double recall = 0, oracle = 0, blocks = 0;
    uint64_t n = 0;
  };
  struct KAcc {
    double blocks = 0, fraction = 0;
    uint64_t n = 0;
  };
  std::vector<double> budgets_, taus_;
  uint32_t layers_;
  std::map<std::tuple<std::string, double, uint32_t>, Acc> acc_;   // (policy, budget|tau, layer)
  std::map<std::tuple<std::string, double, uint32_t>, KAcc> kacc_; // (policy, tau, layer)
};

/// Writes every row of `r` as CSV: kind,policy,group,budget_or_tau,blocks,recall,oracle,fraction.
Status write_csv(const EvalRetrievalResult& r, const std::string& path);

}  // namespace ucm::generate
