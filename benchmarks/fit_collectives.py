"""Fit the collective priors to NCCL's measured all-reduce and send/recv (Vidur's profiles).

    python benchmarks/fit_collectives.py            # a second; writes benchmarks/results/collectives.json

The data: ``shared/data/vidur-profiling/network/{h100_dgx,a100_dgx}/{all_reduce,send_recv}.csv``
(microsoft/vidur, MIT; Agrawal et al., MLSys'24): NCCL all-reduce of 2 KiB-64 MiB of FP16 on
2/4/8 GPUs of one DGX node, and send/recv between two GPUs of a node; the median of each
(size, GPUs), over the ranks profiled. Only intra-node rows (devices_per_node ==
num_workers): a slice is one NVLink domain.

The model is fleetplan's own (:mod:`fleetplan.perf.comm`), fitted by least squares on the
relative errors over every (GPUs, size):

* all-reduce: t = collective_latency_us + steps(n) x collective_hop_latency_us
  + 2 (n - 1)/n x S / (ici x collective_bw_fraction), for the ring and the tree algorithm;
  one-shot (every chip reads the n - 1 others' whole buffers: one step, (n - 1) S bytes) and
  auto (the faster of one-shot and ring at each size, as NCCL and TensorRT-LLM choose);
* send/recv: t = all_to_all_latency_us + collective_hop_latency_us + S / (ici x all_to_all_bw_fraction),
  with the hop latency of the all-reduce fit.

ici is the NVLink bandwidth per direction (H100 SXM5 450 GB/s, A100 SXM4 300 GB/s: the
datasheets' 900 / 600 GB/s bidirectional). The H100 fit of the algorithm the Priors default
names gives the defaults.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fleetplan.instance.schema import Priors
from fleetplan.perf.comm import allreduce_ms, p2p_ms

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "vidur-profiling" / "network"
LINK_GBYTES_PER_S = {"h100_dgx": 450.0, "a100_dgx": 300.0}
_BASE = dict(prefill_mfu=0.5, decode_mfu=0.5, hbm_bw_fraction=0.8, hbm_workspace_gb_per_chip=0.0,
             hbm_headroom_fraction=0.0, tpot_p99_inflation=1.0)


def _medians(path: Path, col: str, intra: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g: dict = defaultdict(list)
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            n, dpn = int(r["num_workers"]), int(r["devices_per_node"])
            if intra and n != dpn:
                continue
            if not intra and dpn != n:
                continue
            g[(n, int(r["size"]))].append(float(r[f"time_stats.{col}.median"]))
    keys = sorted(g)
    return (np.array([k[0] for k in keys]), np.array([k[1] for k in keys], dtype=float),
            np.array([statistics.median(g[k]) for k in keys]))


def _priors(**kw) -> Priors:
    return Priors(**_BASE, **kw)


def fit_allreduce(system: str, algorithm: str) -> dict:
    n, s, t = _medians(DATA / system / "all_reduce.csv", "all_reduce", intra=True)
    link = LINK_GBYTES_PER_S[system]

    def resid(x):
        a, h, inv_f = x
        pr = _priors(collective_latency_us=float(a), collective_hop_latency_us=float(h), collective_bw_fraction=float(1 / inv_f),
                     allreduce_algorithm=algorithm)
        return np.array([float(allreduce_ms(si, int(ni), link, pr)) for si, ni in zip(s, n)]) / t - 1.0

    r = least_squares(resid, [20.0, 0.5, 1.5], bounds=([0.0, 0.0, 1.0], [500.0, 100.0, 1000.0]), method="trf", diff_step=1e-6)
    a, h, inv_f = r.x
    pr = _priors(collective_latency_us=float(a), collective_hop_latency_us=float(h), collective_bw_fraction=float(1 / inv_f),
                 allreduce_algorithm=algorithm)
    # the fit is fleetplan's function: check it, point by point
    pred = np.array([float(allreduce_ms(si, int(ni), link, pr)) for si, ni in zip(s, n)])
    rel = pred / t - 1.0
    per_n = {int(k): {"points": int((n == k).sum()), "rms_rel_error": float(np.sqrt(np.mean(rel[n == k] ** 2))),
                      "median_abs_rel_error": float(np.median(np.abs(rel[n == k])))} for k in sorted(set(n))}
    return {"system": system, "algorithm": algorithm, "points": int(len(t)), "link_gbytes_per_s": link,
            "collective_latency_us": round(float(a), 2), "collective_hop_latency_us": round(float(h), 3),
            "collective_bw_fraction": round(float(1 / inv_f), 4),
            "rms_rel_error": float(np.sqrt(np.mean(rel ** 2))), "median_abs_rel_error": float(np.median(np.abs(rel))), "by_gpus": per_n}


def fit_send_recv(system: str, hop_us: float) -> dict:
    n, s, t = _medians(DATA / system / "send_recv.csv", "send_recv", intra=False)
    keep = n == 2
    s, t = s[keep], t[keep]
    link = LINK_GBYTES_PER_S[system]
    bytes_term = s / (link * 1e9) * 1e3

    def resid(x):
        a, inv_f = x
        return ((a + hop_us) / 1e3 + bytes_term * inv_f) / t - 1.0

    r = least_squares(resid, [10.0, 1.5], bounds=([0.0, 1.0], [500.0, 1000.0]), method="trf")
    a, inv_f = r.x
    pr = _priors(all_to_all_latency_us=float(a), all_to_all_bw_fraction=float(1 / inv_f), collective_hop_latency_us=hop_us)
    pred = np.array([float(p2p_ms(si, link, pr)) for si in s])
    rel = pred / t - 1.0
    return {"system": system, "points": int(len(t)), "link_gbytes_per_s": link, "all_to_all_latency_us": round(float(a), 2),
            "all_to_all_bw_fraction": round(float(1 / inv_f), 4), "rms_rel_error": float(np.sqrt(np.mean(rel ** 2))),
            "median_abs_rel_error": float(np.median(np.abs(rel)))}


def main() -> int:
    out = {"source": "shared/data/vidur-profiling/network (microsoft/vidur, MIT; Agrawal et al., MLSys'24)", "allreduce": [], "send_recv": []}
    for system in LINK_GBYTES_PER_S:
        for alg in ("ring", "tree", "one_shot", "auto"):
            out["allreduce"].append(fit_allreduce(system, alg))
        ring = next(r for r in out["allreduce"] if r["system"] == system and r["algorithm"] == "ring")
        out["send_recv"].append(fit_send_recv(system, ring["collective_hop_latency_us"]))
    for r in out["allreduce"]:
        print(f"all-reduce {r['system']:9s} {r['algorithm']:4s}: latency {r['collective_latency_us']:6.2f} us + "
              f"{r['collective_hop_latency_us']:.3f} us/step, bandwidth {r['collective_bw_fraction']:.3f} x {r['link_gbytes_per_s']:.0f} GB/s; "
              f"median |error| {r['median_abs_rel_error']:.1%}, RMS {r['rms_rel_error']:.1%} ({r['points']} points)")
    for r in out["send_recv"]:
        print(f"send/recv  {r['system']:9s}     : latency {r['all_to_all_latency_us']:6.2f} us, bandwidth {r['all_to_all_bw_fraction']:.3f}; "
              f"median |error| {r['median_abs_rel_error']:.1%}, RMS {r['rms_rel_error']:.1%} ({r['points']} points)")
    dest = HERE / "results" / "collectives.json"
    dest.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
