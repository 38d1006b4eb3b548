"""Instance schema, cross-field checks, loading and hashing."""

from fleetplan.instance.io import bundled_instances, instance_hash, load_instance, parse_instance
from fleetplan.instance.schema import Instance

from fleetplan.instance import checks  # noqa: E402,F401  (registers the cross-field checks every Instance runs)

__all__ = ["Instance", "load_instance", "parse_instance", "instance_hash", "bundled_instances"]
