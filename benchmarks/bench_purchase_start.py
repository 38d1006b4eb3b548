"""The snapshot start on a purchase file: is the plan it builds feasible, and what does HiGHS make of it? (not part of the tests)

    python benchmarks/bench_purchase_start.py FILE START_SECONDS SOLVE_SECONDS

Builds the deterministic equivalent, runs fleetplan.purchase.start.snapshot_start with
START_SECONDS for the snapshots, counts the variables left without a value and the
constraints the start violates (0 and 0: a feasible plan), then solves the tree with
HiGHS from it for SOLVE_SECONDS and prints the termination, incumbent, bound and gap.
docs/benchmarks.md quotes it (benchmarks/purchase/gemini-ironwood-2027-4q.yaml).
"""
import time, sys
import pyomo.environ as pyo
from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.start import snapshot_start
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs
p = load_purchase(sys.argv[1])
pm = build_purchase_model(p)
t=time.perf_counter()
st = snapshot_start(p, pm, SolveOptions(mip_gap=0.05), time.perf_counter()+float(sys.argv[2]))
print("start", st.complete, st.seconds, st.snapshots, {k:v for k,v in st.orders.items() if v}, flush=True)
none = [v.name for v in pm.m.component_data_objects(pyo.Var) if v.value is None]
print("none", len(none), none[:5])
bad = []
for c in pm.m.component_data_objects(pyo.Constraint, active=True):
    b = pyo.value(c.body)
    if (c.lower is not None and b < pyo.value(c.lower) - 1e-6) or (c.upper is not None and b > pyo.value(c.upper) + 1e-6):
        bad.append((c.name, b, c.lower, c.upper))
print("violated", len(bad), bad[:10])
for v in pm.m.component_data_objects(pyo.Var):
    if v.value is not None and ((v.lb is not None and v.value < v.lb - 1e-6) or (v.ub is not None and v.value > v.ub + 1e-6)):
        print("bound", v.name, v.value, v.lb, v.ub); break
r = solve_highs(pm.m, SolveOptions(time_limit_s=float(sys.argv[3]), mip_gap=0.01))
print("de", r.termination, r.objective, r.bound, r.gap, r.wall_time_s)
