"""The precomputed candidate tables: everything nonlinear the sizing model chooses from,
computed once per instance with :mod:`fleetplan.perf`.

* :mod:`fleetplan.tables.derived` -- :func:`build_model_data`: index sets, scenarios, the
  decode, prefill and replica candidates, bounds and pruning (:class:`ModelData`);
  :mod:`fleetplan.tables.data` holds the candidates' types and ModelData,
  :mod:`fleetplan.tables.prefill` the prefill capacity curves.
* :mod:`fleetplan.tables.pods` -- :class:`PodData`: the pod stage's tables (per region and
  chip type, the pod contents and the DCN prefill levels).
* :mod:`fleetplan.tables.cache` -- the table cache (per build, per process) and the keys of
  what each table family reads; :mod:`fleetplan.tables.store` -- its on-disk layer.
* :mod:`fleetplan.tables.summary` -- the ``fleetplan perf`` document (the closed-form figures
  of an instance, from the same tables).

Layer: above :mod:`fleetplan.instance` and :mod:`fleetplan.perf`, below the models, the
solvers and the jobs. The independent verifier (:mod:`fleetplan.results`) does not import
the tables' builders: it re-derives every figure from the instance with :mod:`fleetplan.perf`.
"""
