"""Offline validation of exported objects, as the API server would do it.

Custom resources: against the served version's openAPIV3Schema of the published CRD
(../shared/data/k8s-crds, read in place), with unknown fields refused (kubectl's strict
field validation) and every ``x-kubernetes-validations`` CEL rule of the schema evaluated
with cel-python on the value it sits on. Built-in kinds (Namespace, ConfigMap, Service,
autoscaling/v2 HPA): the kubernetes-validate package's bundled schemas, strict. Object
metadata (names, label and annotation keys and values): apimachinery's syntax rules.
"""

from __future__ import annotations

import copy
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = Path(os.environ.get("FLEETPLAN_DATA", ROOT.parent / "shared" / "data")) / "k8s-crds"
needs_crds = pytest.mark.skipif(not (CRDS / "README.md").is_file(), reason=f"CRDs not found at {CRDS} (set FLEETPLAN_DATA)")
K8S_VERSION = "1.34"  # GKE Ironwood (TPU7x) needs GKE 1.34

CRD_FILES = {
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ("disaggregatedset.x-k8s.io", "DisaggregatedSet"): "disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
    ("disaggregatedset.x-k8s.io", "DisaggregatedSetRoleScaler"): "disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml",
    ("inference.networking.k8s.io", "InferencePool"): "inference.networking.k8s.io_inferencepools.yaml",
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
}


def _strict(schema):
    """Refuse unknown fields wherever the schema lists properties and neither allows
    additional ones nor preserves unknown fields (a structural schema prunes them; strict
    field validation, kubectl's default, refuses them)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


@lru_cache(maxsize=None)
def crd(group: str, kind: str):
    """(served version name, strict openAPIV3Schema, its validator) of a published CRD."""
    import jsonschema

    doc = yaml.load((CRDS / CRD_FILES[(group, kind)]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert doc["spec"]["group"] == group and doc["spec"]["names"]["kind"] == kind
    v = next(v for v in doc["spec"]["versions"] if v["served"] and v["storage"])
    schema = _strict(v["schema"]["openAPIV3Schema"])
    return v["name"], schema, jsonschema.Draft7Validator(schema)


@lru_cache(maxsize=None)
def _program(rule: str):
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_failures(schema: dict, value, path: str = "") -> list[str]:
    """Every x-kubernetes-validations rule on ``schema`` and below that ``value`` breaks."""
    import celpy

    out = []
    for rule in schema.get("x-kubernetes-validations", []):
        ok = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):  # false, or an evaluation error
            out.append(f"{path or '.'}: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        for k, v in value.items():
            sub = schema.get("properties", {}).get(k)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                out += cel_failures(sub, v, f"{path}.{k}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            out += cel_failures(schema["items"], v, f"{path}[{i}]")
    return out


def count_cel_rules(schema) -> int:
    if isinstance(schema, dict):
        return len(schema.get("x-kubernetes-validations", [])) + sum(count_cel_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return sum(count_cel_rules(v) for v in schema)
    return 0


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")


def metadata_problems(md: dict, where: str) -> list[str]:
    out = []
    for key in ("labels", "annotations"):
        for k, v in (md.get(key) or {}).items():
            m = QUALIFIED.match(k)
            if not m or len(m.group(5)) > 63 or len((m.group(1) or "")[:-1]) > 253:
                out.append(f"{where}: {key[:-1]} key {k!r}")
            if not isinstance(v, str):
                out.append(f"{where}: {key[:-1]} {k} is not a string")
            elif key == "labels" and not (len(v) <= 63 and LABEL_VALUE.match(v)):
                out.append(f"{where}: label value {k}={v!r}")
    if "name" in md and not (len(md["name"]) <= 63 and DNS_LABEL.match(md["name"])):
        out.append(f"{where}: name {md['name']!r}")
    return out


def problems(obj: dict) -> list[str]:
    """Everything the API server would refuse in ``obj`` (empty: valid)."""
    import kubernetes_validate

    group, _, version = obj.get("apiVersion", "").rpartition("/")
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    out = metadata_problems(obj.get("metadata", {}), where)
    if (group, obj.get("kind")) in CRD_FILES:
        served, schema, validator = crd(group, obj["kind"])
        if version != served:
            out.append(f"{where}: apiVersion {obj['apiVersion']} is not the served {group}/{served}")
        out += [f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
        out += [f"{where}: CEL {m}" for m in cel_failures(schema, obj)]
        # the pod templates' metadata, which the schema types but does not check
        for tpl in _templates(obj):
            out += metadata_problems(tpl.get("metadata", {}), where + " template")
    else:
        try:
            kubernetes_validate.validate(copy.deepcopy(obj), K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            out.append(f"{where}: {e.message if hasattr(e, 'message') else e}")
    return out


def _templates(obj: dict):
    spec = obj.get("spec", {})
    if "leaderWorkerTemplate" in spec:
        yield spec["leaderWorkerTemplate"].get("workerTemplate", {})
    for role in spec.get("roles", []) if isinstance(spec.get("roles"), list) else []:
        yield {"metadata": role.get("metadata", {})}
        yield role.get("spec", {}).get("leaderWorkerTemplate", {}).get("workerTemplate", {})
