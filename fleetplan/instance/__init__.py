"""Instance schema, cross-field checks, loading and hashing."""

from fleetplan.instance.io import bundled_instances, instance_hash, load_instance, parse_instance
from fleetplan.instance.schema import Instance

__all__ = ["Instance", "load_instance", "parse_instance", "instance_hash", "bundled_instances"]
