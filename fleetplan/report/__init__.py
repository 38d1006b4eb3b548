"""Reports planners look at: the plan's figures and tables (HTML/Markdown), the
sensitivity of the plan to its priors (tornado), and the cost levers re-solved and
ranked. Figures come from :mod:`fleetplan.perf` curves and the plan's own evaluation;
every sweep point is a real re-solve (:mod:`fleetplan.report.sweep`) run by a pluggable
executor (:mod:`fleetplan.report.executor`)."""
