"""What a verified plan and placement are exported as for the systems that run them:
:mod:`controller` (the versioned controller JSON document: slices per region and pod,
routing weights, failover routing, autoscaler and alert thresholds; docs/controller.md)
and :mod:`k8s` (the Kubernetes objects and Prometheus rules built from that document).

Nothing is imported here: ``fleetplan place --help`` reads the Kubernetes defaults from
:mod:`fleetplan.export.k8s.common` without loading the document models or the bundle.
"""
