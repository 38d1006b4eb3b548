"""Shared pieces of the Kubernetes export: the options, the units (a pool's slices in one
pod), object names, the labels that tie every manifest to its plan, and the input checks.

Kubernetes syntax rules used here are the API server's (apimachinery validation): an
object name is a DNS-1123 label (at most 63 lowercase alphanumerics or '-'), a label
value at most 63 characters alphanumeric at both ends, a label key an optional DNS
subdomain prefix and '/' before such a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetplan import __version__
from fleetplan.errors import InputError, Problem

__all__ = [
    "FORMATS", "WORKLOADS", "SCALERS", "LABEL", "DEFAULT_ICI_DOMAIN_LABEL", "DEFAULT_NAMESPACE", "DEFAULT_PROMETHEUS_URL",
    "ExportOptions", "Unit", "dns_name", "label_value", "is_label_key", "is_label_value", "is_dns_label", "hash_labels",
    "hash_annotations", "meta", "HASH_LABEL_CHARS",
]

FORMATS = ("k8s", "keda", "prometheus", "all")
WORKLOADS = ("leaderworkerset", "disaggregatedset")
SCALERS = ("keda", "hpa")
LABEL = "fleetplan/"  # prefix of fleetplan's labels and annotations
DEFAULT_ICI_DOMAIN_LABEL = "fleetplan/ici-domain"
DEFAULT_NAMESPACE = "fleetplan"
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
HASH_LABEL_CHARS = 16  # a label value holds at most 63 characters; the full SHA-256 goes in an annotation

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_dns_label(s: str) -> bool:
    return len(s) <= 63 and bool(_DNS_LABEL.match(s))


def is_label_value(s: str) -> bool:
    return len(s) <= 63 and bool(_LABEL_VALUE.match(s))


def is_label_key(s: str) -> bool:
    if not _LABEL_KEY.match(s):
        return False
    prefix, _, name = s.rpartition("/")
    return len(name) <= 63 and len(prefix) <= 253


@dataclass(frozen=True)
class ExportOptions:
    """What to write and how (see ``fleetplan export --help``).

    formats: a subset of {"k8s", "keda", "prometheus"}; workload: "leaderworkerset" or
    "disaggregatedset"; scaler: "keda" or "hpa" (the objects ``keda`` writes); engine: a key
    of :data:`fleetplan.export.k8s.engines.ENGINES`; ici_domain_label: the node label whose value
    names a placement pod (ICI domain); namespace: where every object goes; prometheus_url:
    the Prometheus the autoscalers query."""

    formats: frozenset[str] = frozenset({"k8s", "keda", "prometheus"})
    workload: str = "leaderworkerset"
    scaler: str = "keda"
    engine: str = "vllm"
    ici_domain_label: str = DEFAULT_ICI_DOMAIN_LABEL
    namespace: str = DEFAULT_NAMESPACE
    prometheus_url: str = DEFAULT_PROMETHEUS_URL

    def check(self) -> None:
        """Raises InputError naming each option that is not usable."""
        from fleetplan.export.k8s.engines import ENGINES

        bad: list[Problem] = []
        if not self.formats or not self.formats <= set(FORMATS) - {"all"}:
            bad.append(Problem("--format", f"give one of {', '.join(FORMATS)}.", ",".join(sorted(self.formats))))
        if self.workload not in WORKLOADS:
            bad.append(Problem("--workload", f"give {' or '.join(WORKLOADS)}.", self.workload))
        if self.scaler not in SCALERS:
            bad.append(Problem("--scaler", f"give {' or '.join(SCALERS)}.", self.scaler))
        if self.engine not in ENGINES:
            bad.append(Problem("--engine", f"unknown serving engine; known: {', '.join(sorted(ENGINES))} (their metric names are in docs/controller.md).",
                               self.engine))
        if not is_label_key(self.ici_domain_label):
            bad.append(Problem("--ici-domain-label", "not a Kubernetes label key ([prefix/]name, name at most 63 alphanumerics, '-', '_' or '.').",
                               self.ici_domain_label))
        if not is_dns_label(self.namespace):
            bad.append(Problem("--namespace", "not a Kubernetes namespace name (at most 63 lowercase alphanumerics or '-').", self.namespace))
        if not re.match(r"^https?://[^\s\"']+$", self.prometheus_url):
            bad.append(Problem("--prometheus-url", "give the http(s) URL of the Prometheus the autoscalers query.", self.prometheus_url))
        if bad:
            raise InputError("export options", bad)


@dataclass(frozen=True)
class Unit:
    """The slices of one pool placed in one pod (ICI domain), exported as one group of
    LeaderWorkerSet replicas (or one DisaggregatedSet role).

    region, tier (None for warm slices), role (prefill / decode / replica / warm), shape
    (slice label, chip x chips), chip, chips (per slice), pod (placement pod id), slices
    (count), name (the object's name), domain (the pod as a label value)."""

    region: str
    tier: str | None
    role: str
    shape: str
    chip: str
    chips: int
    pod: str
    slices: int
    name: str
    domain: str
    slice_ids: tuple[str, ...] = field(default=())

    @property
    def pool(self) -> tuple[str, str | None, str, str]:
        return (self.region, self.tier, self.role, self.shape)


def dns_name(*parts: str) -> str:
    """Parts joined by '-', lower-cased, '_' and '.' turned into '-' (a DNS-1123 label
    when short enough; the caller checks length and collisions)."""
    return "-".join(parts).lower().replace("_", "-").replace(".", "-")


def label_value(pod_id: str) -> str:
    """A placement pod id ('region/chip/NN') as a label value ('region.chip.NN')."""
    return pod_id.replace("/", ".")


def hash_labels(plan_hash: str, placement_hash: str) -> dict[str, str]:
    """The labels on every manifest: managed-by, fleetplan's version and the plan and
    placement hashes (their first 16 hex digits: a label value holds 63 characters)."""
    return {
        "app.kubernetes.io/managed-by": "fleetplan",
        f"{LABEL}version": __version__,
        f"{LABEL}plan-hash": plan_hash[:HASH_LABEL_CHARS],
        f"{LABEL}placement-hash": placement_hash[:HASH_LABEL_CHARS],
    }


def hash_annotations(instance_name: str, instance_hash: str, plan_hash: str, placement_hash: str) -> dict[str, str]:
    """The annotations on every manifest: the full hashes and the instance name."""
    return {
        f"{LABEL}instance": instance_name,
        f"{LABEL}instance-hash": instance_hash,
        f"{LABEL}plan-hash": plan_hash,
        f"{LABEL}placement-hash": placement_hash,
    }


def meta(name: str, namespace: str | None, tie: tuple[dict, dict], labels: dict | None = None, annotations: dict | None = None) -> dict:
    """Object metadata: ``tie`` = (hash labels, hash annotations) plus the object's own."""
    m: dict = {"name": name, "labels": {**tie[0], **(labels or {})}, "annotations": {**tie[1], **(annotations or {})}}
    if namespace is not None:
        m["namespace"] = namespace
    return m
