"""The connector's counters through vLLM's connector-stats mechanism (vLLM 0.32,
vllm/distributed/kv_transfer/kv_connector/v1/metrics.py): the workers' and the scheduler's
connectors return UcmConnectorStats from get_kv_connector_stats() (the counts since their last
call); vLLM sums them over the workers and the scheduler (aggregate), logs them per interval
("KV Transfer metrics: ...", reduce) and, with stats on (vllm serve's default), hands them to
UcmPromMetrics, which vLLM's Prometheus logger builds through UcmConnector.build_prom_metrics: the
`ucm_*` series of vLLM's /metrics, labelled like vLLM's own (model_name, engine).

Keys of the data dict (all sums over the interval):
    loaded_blocks, loaded_bytes, load_seconds   ucm blocks loaded into the KV cache, their bytes, seconds
    load_errors, load_errors_<CODE>              blocks that failed to load, in all and by libucm code
                                                 (CHECKSUM, NOT_FOUND, IO, ...; EXCEPTION, UNPLANNED)
    saved_blocks, saved_bytes                    blocks written to the store, their bytes
    saves_dropped, saves_cut_at_bad_kv           saves dropped (queue full, shutdown), cut at KV not good
    bad_reads_reported, store_errors             engine blocks reported to vLLM as bad; store calls that raised
    save_queue_bytes                             bytes of copies waiting to be written (the last value)
    lookups, hit_tokens                          the scheduler's lookups and the tokens they found
"""
from __future__ import annotations

from typing import Any, Dict, List

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats

#: counter name (without "ucm_" and "_total") -> help
COUNTERS = {
    "loaded_blocks": "ucm blocks loaded from the store into vLLM's KV cache",
    "loaded_bytes": "bytes of the ucm blocks loaded",
    "load_seconds": "seconds spent loading ucm blocks",
    "saved_blocks": "ucm blocks written to the store",
    "saved_bytes": "bytes of the ucm blocks written",
    "saves_dropped": "saves dropped (the save queue full, or at shutdown)",
    "saves_cut_at_bad_kv": "saves cut at the first block whose KV was not good",
    "bad_reads_reported": "engine blocks reported to vLLM as holding no good KV (it recomputes them)",
    "store_errors": "store calls that raised (answered as a miss, a load error or a dropped save)",
    "lookups": "prompts looked up in the store by the scheduler",
    "hit_tokens": "prompt tokens the store had (the scheduler's matched tokens)",
}
GAUGES = {"save_queue_bytes": "bytes of KV copies waiting to be written to the store"}
ERROR_PREFIX = "load_errors_"


class UcmConnectorStats(KVConnectorStats):
    """The connector's counts since the last report (keys: the module's docstring); sums."""

    def reset(self):
        self.data = {}

    def aggregate(self, other):
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, Any]:
        d = dict(self.data)
        s = d.get("load_seconds", 0)
        d["load_GBps"] = d.get("loaded_bytes", 0) / s / 1e9 if s else 0.0
        return d

    def is_empty(self) -> bool:
        return not any(self.data.values())


def delta(now: Dict[str, float], last: Dict[str, float]) -> Dict[str, float]:
    """The counts of `now` since `last` (both running totals), nonzero ones only."""
    return {k: v - last.get(k, 0) for k, v in now.items() if v - last.get(k, 0)}


class UcmPromMetrics(KVConnectorPromMetrics):
    """`ucm_<counter>_total` for COUNTERS, `ucm_load_errors_total{code}`, `ucm_save_queue_bytes`,
    with vLLM's labels (model_name, engine)."""

    def __init__(self, vllm_config, metric_types, labelnames: List[str], per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        _unregister_ucm()  # a second engine in one process (tests) registers them again
        self._counters = {k: self._counter_cls(name=f"ucm_{k}", documentation=h, labelnames=labelnames)
                          for k, h in COUNTERS.items()}
        self._errors = self._counter_cls(name="ucm_load_errors", documentation="ucm blocks that failed to load, "
                                         "by libucm error code", labelnames=labelnames + ["code"])
        self._gauges = {k: self._gauge_cls(name=f"ucm_{k}", documentation=h, labelnames=labelnames,
                                           multiprocess_mode="mostrecent")
                        for k, h in GAUGES.items()}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0):
        labels = self.per_engine_labelvalues[engine_idx]
        for k, v in (transfer_stats_data or {}).items():
            if k in self._counters and v > 0:
                self._counters[k].labels(*labels).inc(v)
            elif k in self._gauges:
                self._gauges[k].labels(*labels).set(v)
            elif k.startswith(ERROR_PREFIX) and v > 0:
                self._errors.labels(*labels, k[len(ERROR_PREFIX):]).inc(v)


def _unregister_ucm() -> None:
    try:
        from prometheus_client import REGISTRY
        for c in list(REGISTRY._collector_to_names):
            if getattr(c, "_name", "").startswith("ucm_"):
                REGISTRY.unregister(c)
    except Exception:  # pragma: no cover - a registry without those internals: nothing to undo
        pass
