// pipelines/generate/eval_stats.cc: see eval_stats.h.
#include "eval_stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

namespace ucm::generate {

namespace {

uint32_t budget_blocks(double f, size_t n) {
  return uint32_t(std::clamp<double>(std::ceil(f * double(n) - 1e-9), 1.0, double(n)));
}

// Recall of query head h with the set of its KV head.
double recall_of(const QueryMasses& qm, uint32_t h, const std::vector<uint32_t>& set) {
  double r = 0;
  for (uint32_t j : set) r += qm.at(h, j);
  return r;
}

}  // namespace

EvalStats::Curves EvalStats::oracle_curves(const QueryMasses& qm) {
  const size_t n = qm.blocks();
  std::vector<std::vector<double>> cur(qm.q_heads(), std::vector<double>(n + 1, 0.0));
  std::vector<uint32_t> order(n);
  std::vector<double> gm(n);
  for (uint32_t g = 0; g < qm.kv_heads(); ++g) {
    for (size_t j = 0; j < n; ++j) {
      gm[j] = 0;
      for (uint32_t h = g * qm.group(); h < (g + 1) * qm.group(); ++h) gm[j] += qm.at(h, j);
    }
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return gm[a] > gm[b]; });
    for (uint32_t h = g * qm.group(); h < (g + 1) * qm.group(); ++h)
      for (size_t k = 0; k < n; ++k) cur[h][k + 1] = cur[h][k] + qm.at(h, order[k]);
  }
  return cur;
}

void EvalStats::add_oracle(uint32_t layer, const QueryMasses& qm, const Curves& cur) {
  const size_t n = qm.blocks();
  for (double f : budgets_) {
    const uint32_t k = budget_blocks(f, n);
    auto& a = acc_[{"oracle", f, layer}];
    for (uint32_t h = 0; h < qm.q_heads(); ++h) {
      a.recall += cur[h][k];
      a.oracle += cur[h][k];
      a.blocks += k;
      ++a.n;
    }
  }
  for (double tau : taus_) {
    auto& ka = kacc_[{"oracle", tau, layer}];
    for (uint32_t h = 0; h < qm.q_heads(); ++h) {
      size_t k = 1;
      while (k < n && cur[h][k] < tau) ++k;
      ka.blocks += double(k);
      ka.fraction += double(k) / double(n);
      ++ka.n;
    }
  }
}

Status EvalStats::add_policy(const std::string& policy, bool psa, double tau, uint32_t layer, const QueryMasses& qm,
                             const Curves& cur, const SelectFn& select) {
  const size_t n = qm.blocks();
  const uint32_t G = qm.group();
  std::map<uint32_t, std::vector<std::vector<uint32_t>>> memo;
  auto sets_at = [&](uint32_t k, const std::vector<std::vector<uint32_t>>** out) -> Status {
    auto it = memo.find(k);
    if (it == memo.end()) {
      std::vector<std::vector<uint32_t>> s;
      UCM_RETURN_IF_ERROR(select(k, &s));
      it = memo.emplace(k, std::move(s)).first;
    }
    *out = &it->second;
    return Status::OK();
  };
  auto record = [&](double key, const std::vector<std::vector<uint32_t>>& sets) {
    auto& a = acc_[{policy, key, layer}];
    for (uint32_t h = 0; h < qm.q_heads(); ++h) {
      const auto& s = sets[h / G];
      a.recall += recall_of(qm, h, s);
      a.oracle += cur[h][std::min(s.size(), n)];
      a.blocks += double(s.size());
      ++a.n;
    }
  };
  if (psa) {
    const std::vector<std::vector<uint32_t>>* sets = nullptr;
    UCM_RETURN_IF_ERROR(sets_at(0, &sets));
    record(tau, *sets);
    auto& ka = kacc_[{policy, tau, layer}];
    for (uint32_t h = 0; h < qm.q_heads(); ++h) {
      ka.blocks += double((*sets)[h / G].size());
      ka.fraction += double((*sets)[h / G].size()) / double(n);
      ++ka.n;
    }
    return Status::OK();
  }
  for (double f : budgets_) {
    const std::vector<std::vector<uint32_t>>* sets = nullptr;
    UCM_RETURN_IF_ERROR(sets_at(budget_blocks(f, n), &sets));
    record(f, *sets);
  }
  // k_tau per query head: the smallest budget whose selection reaches tau (selections of a
  // top-k policy grow with k, so recall is monotone and a binary search finds it).
  for (double t : taus_) {
    auto& ka = kacc_[{policy, t, layer}];
    for (uint32_t h = 0; h < qm.q_heads(); ++h) {
      uint32_t lo = 1, hi = uint32_t(n);
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        const std::vector<std::vector<uint32_t>>* sets = nullptr;
        UCM_RETURN_IF_ERROR(sets_at(mid, &sets));
        if (recall_of(qm, h, (*sets)[h / G]) >= t)
          hi = mid;
        else
          lo = mid + 1;
      }
      ka.blocks += lo;
      ka.fraction += double(lo) / double(n);
      ++ka.n;
    }
  }
  return Status::OK();
}

void EvalStats::finish(EvalRetrievalResult* out) const {
  auto group_of = [](uint32_t l) { return l == 0 ? std::string("layer0") : l == 1 ? "layer1" : "layers2+"; };
  std::map<std::tuple<std::string, double, std::string>, Acc> g;
  for (const auto& [key, a] : acc_) {
    const auto& [policy, b, layer] = key;
    out->rows.push_back({policy, "l" + std::to_string(layer), b, a.blocks / double(a.n), a.recall / double(a.n),
                         a.oracle / double(a.n)});
    auto& ga = g[{policy, b, group_of(layer)}];
    ga.recall += a.recall;
    ga.oracle += a.oracle;
    ga.blocks += a.blocks;
    ga.n += a.n;
  }
  for (const auto& [key, a] : g) {
    const auto& [policy, b, grp] = key;
    out->rows.push_back({policy, grp, b, a.blocks / double(a.n), a.recall / double(a.n), a.oracle / double(a.n)});
  }
  std::map<std::tuple<std::string, double, std::string>, KAcc> gk;
  for (const auto& [key, a] : kacc_) {
    const auto& [policy, t, layer] = key;
    out->k_tau.push_back({policy, "l" + std::to_string(layer), t, a.blocks / double(a.n), a.fraction / double(a.n)});
    auto& ga = gk[{policy, t, group_of(layer)}];
    ga.blocks += a.blocks;
    ga.fraction += a.fraction;
    ga.n += a.n;
  }
  for (const auto& [key, a] : gk) {
    const auto& [policy, t, grp] = key;
    out->k_tau.push_back({policy, grp, t, a.blocks / double(a.n), a.fraction / double(a.n)});
  }
}

Status write_csv(const EvalRetrievalResult& r, const std::string& path) {
  std::ofstream f(path);
  if (!f) return Status::IOError("cannot write " + path);
  f << "kind,policy,group,budget_or_tau,blocks,recall,oracle,fraction\n";
  char buf[256];
  for (const auto& x : r.rows) {
    std::snprintf(buf, sizeof buf, "recall,%s,%s,%.4f,%.3f,%.6f,%.6f,\n", x.policy.c_str(), x.group.c_str(), x.budget,
                  x.blocks, x.recall, x.oracle);
    f << buf;
  }
  for (const auto& k : r.k_tau) {
    std::snprintf(buf, sizeof buf, "k_tau,%s,%s,%.4f,%.3f,,,%.6f\n", k.policy.c_str(), k.group.c_str(), k.tau,
                  k.blocks, k.fraction);
    f << buf;
  }
  f.flush();
  if (!f) return Status::IOError("writing " + path + " failed");
  return Status::OK();
}

std::string EvalRetrievalResult::to_json() const {
  nlohmann::json rs = nlohmann::json::array(), ks = nlohmann::json::array();
  for (const auto& x : rows)
    rs.push_back({{"policy", x.policy}, {"group", x.group}, {"budget", x.budget}, {"blocks", x.blocks},
                  {"recall", x.recall}, {"oracle", x.oracle}});
  for (const auto& k : k_tau)
    ks.push_back({{"policy", k.policy}, {"group", k.group}, {"tau", k.tau}, {"blocks", k.blocks},
                  {"fraction", k.fraction}});
  return nlohmann::json{{"documents", documents}, {"contexts", contexts}, {"queries", queries},
                        {"rows", rs}, {"k_tau", ks}}
      .dump();
}

std::string EvalRetrievalResult::to_text() const {
  std::ostringstream s;
  char buf[256];
  s << documents.size() << " documents, " << queries << " queries (context tokens:";
  for (auto c : contexts) s << " " << c;
  s << ")\n\nmean recall R (oracle R*), layers >= 2 | layer 0 | layer 1\n";
  for (const auto& x : rows) {
    if (x.group != "layers2+") continue;
    auto find = [&](const char* grp) {
      for (const auto& y : rows)
        if (y.group == grp && y.policy == x.policy && y.budget == x.budget) return y.recall;
      return 0.0;
    };
    std::snprintf(buf, sizeof buf, "  %-6s %s %.3f: %5.1f blocks  R %.4f (R* %.4f) | %.4f | %.4f\n",
                  x.policy.c_str(), x.policy == "psa" ? "tau" : "f  ", x.budget, x.blocks, x.recall, x.oracle,
                  find("layer0"), find("layer1"));
    s << buf;
  }
  s << "\nk_tau (mean blocks, fraction of the context), layers >= 2\n";
  for (const auto& k : k_tau) {
    if (k.group != "layers2+") continue;
    std::snprintf(buf, sizeof buf, "  %-6s tau %.2f: %6.1f blocks (%.3f)\n", k.policy.c_str(), k.tau, k.blocks,
                  k.fraction);
    s << buf;
  }
  return s.str();
}

}  // namespace ucm::generate
