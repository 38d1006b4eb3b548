"""Fuzz the instance loader and ``fleetplan perf`` with malformed instances.

Each example starts from the bundled gemini-ironwood data and applies 1-4 random
mutations at random paths (wrong types, NaN/inf, huge and negative numbers, deleted and
unknown keys, unknown names, perturbed shares, truncated lists, nested garbage). Whatever
comes out, the loader either returns an Instance or raises InstanceError (one line per
problem), and the CLI exits 0 or 2 without a traceback.

Cost: ~20 ms per refused document (the YAML is written with libyaml's emitter when it is
installed: the pure-Python one took a fifth of an example). About 5% of the documents still
load; ``perf`` then prints its tables (~0.15 s each). The default run draws 100 documents
(~6 s of CPU); ``pytest -m slow`` draws 300 (the sample the default run drew until the
suite outgrew its 5-minute budget, ~17 s), and FLEETPLAN_FUZZ_EXAMPLES=N sets both for a
longer hunt. Every numeric field has a physical cap in the schema, so no valid document
can overflow the performance model (``test_perf_on_extreme_values``).
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InstanceError
from fleetplan.instance.io import bundled_instance_path, parse_instance
from fleetplan.instance.schema import Instance

DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
BASE: dict = yaml.safe_load(bundled_instance_path("gemini-ironwood").read_text(encoding="utf-8"))
runner = CliRunner()

# ----------------------------------------------------------------------------- values

SPECIAL_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0])
HUGE_INTS = st.sampled_from([2**31, 2**53 + 1, 2**63, 2**64, 10**18, 10**30, 10**400, -(10**400)])
NEGATIVE = st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-12, allow_nan=False, allow_infinity=False))
# Strings that stress the messages: rich markup, line breaks, YAML-ish and empty text.
NASTY_TEXT = st.sampled_from(["", " ", "[/x]", "[bold]", "a\nb", "null", "~", "yes", "1e3", "0x10", "us-east", "ironwood", "short"])
TEXT = st.one_of(st.text(max_size=12), NASTY_TEXT)
SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT, st.integers(), st.floats(), SPECIAL_FLOATS, HUGE_INTS, NEGATIVE, st.sampled_from([0, 1, 0.0, 1.0])
)
KEYS = st.one_of(TEXT, st.integers(), st.booleans(), st.none())
GARBAGE = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=6
)
UNKNOWN_NAMES = st.one_of(st.sampled_from(["eu-west", "tpu-v9", "ultra", "us_east", "Ironwood", "xx"]), TEXT)

# ----------------------------------------------------------------------------- paths


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path below ``node`` (dict keys and list indices), the root excluded."""
    out: list[tuple] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(_paths(v, prefix + (k,)))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    """``doc`` with the node at ``path`` replaced (the root itself when ``path`` is empty)."""
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- mutations

KINDS = [
    "replace",          # any garbage: wrong type, None, bool, NaN/inf, huge or negative number, nested structure
    "replace_scalar",   # a scalar leaf by another scalar (the most common typo)
    "delete",           # drop a key or a list element
    "add_key",          # an unknown (misspelt) key in a mapping
    "rename_key",       # a mapping key renamed (unknown field, or an unknown region/chip/class name)
    "rename_value",     # a name-valued string (failover_to, tier names, kinds ...) replaced by an unknown one
    "perturb_number",   # a number scaled or nudged (shares no longer summing to 1, zero, negative, huge)
    "perturb_share",    # a 'share' (or an hourly_load entry) nudged off
    "truncate",         # a list cut short (hourly_load with < 24 values, empty lists)
    "wrap",             # a value nested in a list or mapping
    "replace_root",     # the whole document replaced
]


def _mutate(doc: Any, data: st.DataObject) -> Any:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    paths = _paths(doc)
    if kind == "replace_root" or not paths:
        return data.draw(GARBAGE, label="root")

    def pick(pred=lambda p, v: True):
        cands = [p for p in paths if pred(p, _get(doc, p))]
        return data.draw(st.sampled_from(cands), label="path") if cands else None

    if kind == "replace":
        p = pick()
        return _set(doc, p, data.draw(GARBAGE, label="value"))
    if kind == "replace_scalar":
        p = pick(lambda p, v: not isinstance(v, (dict, list))) or pick()
        return _set(doc, p, data.draw(SCALARS, label="value"))
    if kind == "delete":
        p = pick()
        del _get(doc, p[:-1])[p[-1]]
        return doc
    if kind == "add_key":
        maps = [()] * isinstance(doc, dict) + [p for p in paths if isinstance(_get(doc, p), dict)]
        if not maps:
            return doc
        p = data.draw(st.sampled_from(maps), label="path")
        _get(doc, p)[data.draw(KEYS, label="key")] = data.draw(GARBAGE, label="value")
        return doc
    if kind == "rename_key":
        p = pick(lambda p, v: isinstance(_get(doc, p[:-1]), dict))
        if p is None:
            return doc
        parent = _get(doc, p[:-1])
        parent[data.draw(st.one_of(UNKNOWN_NAMES, st.just(f"{p[-1]}s")), label="new key")] = parent.pop(p[-1])
        return doc
    if kind == "rename_value":
        p = pick(lambda p, v: isinstance(v, str))
        return doc if p is None else _set(doc, p, data.draw(UNKNOWN_NAMES, label="name"))
    if kind == "perturb_number":
        p = pick(lambda p, v: _is_number(v))
        if p is None:
            return doc
        v = _get(doc, p)
        how = data.draw(st.sampled_from(["scale", "add", "negate", "zero", "int", "special"]), label="how")
        if how == "special":  # NaN, inf, beyond-float-range ints, denormals in a numeric field
            return _set(doc, p, data.draw(st.one_of(SPECIAL_FLOATS, HUGE_INTS), label="special"))
        factor = data.draw(st.sampled_from([0.5, 0.999999, 1.000001, 1.5, 2, 1e6, 1e300]), label="by")
        try:
            new = {"scale": lambda: v * factor, "add": lambda: v + factor, "negate": lambda: -v, "zero": lambda: 0,
                   "int": lambda: int(v * factor)}[how]()
        except (OverflowError, ValueError):  # huge int x float, int(inf), int(nan)
            new = -v
        return _set(doc, p, new)
    if kind == "perturb_share":
        p = pick(lambda p, v: _is_number(v) and len(p) >= 2 and (p[-1] == "share" or p[-2] == "hourly_load"))
        if p is None:
            return doc
        delta = data.draw(st.sampled_from([-0.5, -0.01, -1e-5, 1e-9, 1e-5, 0.01, 0.5]), label="delta")
        try:
            return _set(doc, p, _get(doc, p) + delta)
        except OverflowError:  # an earlier mutation left a huge int there
            return doc
    if kind == "truncate":
        p = pick(lambda p, v: isinstance(v, list) and len(v) > 0)
        if p is None:
            return doc
        v = _get(doc, p)
        return _set(doc, p, v[: data.draw(st.integers(0, len(v) - 1), label="keep")])
    if kind == "wrap":
        p = pick()
        v = _get(doc, p)
        return _set(doc, p, data.draw(st.sampled_from([[v], {"value": v}, [v, v], {"x": [v]}]), label="wrapped"))
    raise AssertionError(kind)


# ----------------------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _one_line_each(err: InstanceError) -> None:
    assert err.problems
    for p in err.problems:
        assert "\n" not in p.render() and "\r" not in p.render(), p.render()


def _examples(default: int) -> int:
    """FLEETPLAN_FUZZ_EXAMPLES when set (a longer hunt), else ``default``."""
    return int(os.environ.get("FLEETPLAN_FUZZ_EXAMPLES", default))


FUZZ_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _fuzz_one(fuzz_dir: Path, data: st.DataObject) -> None:
    doc = copy.deepcopy(BASE)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        doc = _mutate(doc, data)

    # (a) parse_instance: an Instance or an InstanceError; anything else fails the test.
    try:
        parsed = parse_instance(doc)
    except InstanceError as e:
        _one_line_each(e)
        parsed = None
        event("refused")
    else:
        assert isinstance(parsed, Instance)
        event("loads")

    path = fuzz_dir / "doc.yaml"
    # libyaml's emitter when installed (the same YAML document, 5x faster than the
    # pure-Python one: a fifth of an example's time went into writing it)
    path.write_text(yaml.dump(doc, Dumper=DUMPER, sort_keys=False), encoding="utf-8")

    # (b) the CLI on the same document as YAML: exit 0 or 2, never a traceback. A document
    # parse_instance refused is refused by the CLI too (the YAML round trip keeps it as is).
    result = runner.invoke(app, ["perf", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: invalid instance "), result.output
    if parsed is None:
        assert result.exit_code == 2, result.output


@settings(max_examples=_examples(100), **FUZZ_SETTINGS)
@given(data=st.data())
def test_malformed_instances_never_crash(fuzz_dir: Path, data: st.DataObject):
    """100 mutated documents (~6 s of CPU): the default run's sample."""
    _fuzz_one(fuzz_dir, data)


@pytest.mark.slow
@settings(max_examples=_examples(300), **FUZZ_SETTINGS)
@given(data=st.data())
def test_malformed_instances_never_crash_full_sample(fuzz_dir: Path, data: st.DataObject):
    """300 mutated documents (~17 s of CPU), the sample the default run drew until 2026-12-07."""
    _fuzz_one(fuzz_dir, data)


# ----------------------------------------------------------------------------- known bugs

# Values at the edge of what the schema allows (each field has a physical cap) must run
# through perf without a crash; values past the cap are refused with exit code 2.
EXTREMES = [
    ("gemini-ironwood", ("chips", "ironwood", "hbm_gb"), 1e5),
    ("gemini-ironwood", ("chips", "ironwood", "hbm_gb"), 1e300),
    ("gemini-ironwood", ("model", "bytes_per_kv_element"), 0.0625),
    ("gemini-ironwood", ("model", "bytes_per_kv_element"), 5e-324),
    ("llama70b-h100", ("chips", "h100", "hbm_gb"), 1e20),
    ("llama70b-h100", ("chips", "h100", "peak_tflops"), 1e6),
    ("llama70b-h100", ("chips", "h100", "peak_tflops"), 1e200),
    ("llama70b-h100", ("serving", "utilisation_headroom"), 0.05),
    ("llama70b-h100", ("serving", "utilisation_headroom"), 5e-324),
]


@pytest.mark.parametrize("name,path,value", EXTREMES, ids=[f"{n}:{'.'.join(p)}={v:g}" for n, p, v in EXTREMES])
def test_perf_on_extreme_values(tmp_path: Path, name: str, path: tuple, value: float):
    doc = yaml.safe_load(bundled_instance_path(name).read_text(encoding="utf-8"))
    _set(doc, path, value)
    f = tmp_path / "extreme.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = runner.invoke(app, ["perf", str(f)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2)
    assert "Traceback" not in result.output
