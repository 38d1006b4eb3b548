"""Bad instance files: each kind of mistake gives exit code 2 and one line per problem that
names the field path (and the unit, for numeric fields), never a traceback.

Every case mutates a deep copy of the bundled gemini-ironwood instance (or writes a broken
file) and is checked twice: through the CLI (``fleetplan perf FILE``, in-process) and
through :func:`fleetplan.instance.io.load_instance`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InstanceError
from fleetplan.instance.io import bundled_instance_path, load_instance

BASE_PATH = bundled_instance_path("gemini-ironwood")
BASE_TEXT = BASE_PATH.read_text(encoding="utf-8")
BASE: dict = yaml.safe_load(BASE_TEXT)

# This typer's CliRunner has no ``mix_stderr``: ``result.stderr`` is stderr alone,
# ``result.output`` is stdout and stderr interleaved.
runner = CliRunner()


@dataclass
class Case:
    """One kind of mistake.

    ``mutate`` edits a deep copy of the instance data in place (or returns a replacement
    document); ``write`` instead produces the file itself from ``tmp_path``.
    ``path`` must appear in the problem that reports the mistake, together with every
    string of ``says`` (a unit for numeric fields, else a word of the explanation).
    """

    id: str
    path: str
    says: tuple[str, ...] = ()
    mutate: Callable[[dict], Any] | None = None
    write: Callable[[Path], Path] | None = None
    marks: list = field(default_factory=list)


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def f(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return f


def _del(*keys):
    def f(d):
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return f


def _rename(*keys_and_new):
    *keys, new = keys_and_new

    def f(d):
        for k in keys[:-1]:
            d = d[k]
        d[new] = d.pop(keys[-1])

    return f


def _text(text: str | bytes, name: str = "bad.yaml"):
    def w(tmp_path: Path) -> Path:
        p = tmp_path / name
        (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
        return p

    return w


def _hourly_scaled(d):
    d["regions"]["us-central"]["hourly_load"] = [round(x * 0.9, 4) for x in d["regions"]["us-central"]["hourly_load"]]


def _tiers_out_of_order(d):
    d["workload"]["tiers"] = [
        {"name": "mid", "max_input_tokens": 65536},
        {"name": "short", "max_input_tokens": 16384},
        {"name": "long", "max_input_tokens": None},
    ]


def _too_big_model(d):
    d["model"]["total_params_b"] = 10000  # 10 TB of FP8 weights; the largest slice has 32 x 192 GB
    d["model"]["active_params_b"] = 1000


CASES = [
    # --- cross-field checks (fleetplan.instance.checks)
    Case("input_mix_shares_not_1", "workload.input_mix", ("sum to 1", "fraction"),
         mutate=_set("workload", "input_mix", 0, "share", 0.5)),
    Case("class_shares_not_1", "workload.classes", ("sum to 1", "fraction"),
         mutate=_set("workload", "classes", "batch", "share", 0.3)),
    Case("unknown_failover_region", "regions.us-east.failover_to.1", ("unknown region", "us-central"),
         mutate=_set("regions", "us-east", "failover_to", ["us-central", "eu-west"])),
    Case("unknown_chip_in_pods", "regions.us-east.pods.tpu-v9", ("unknown chip type", "ironwood"),
         mutate=_set("regions", "us-east", "pods", {"tpu-v9": {"installed": 0, "available_new": 4}})),
    Case("hourly_load_max_not_1", "regions.us-central.hourly_load", ("largest must be 1.0", "fractions of peak_rps"),
         mutate=_hourly_scaled),
    Case("model_fits_no_slice", "chips", ("does not fit any slice", "GB"), mutate=_too_big_model),
    Case("slice_not_multiple_of_vm", "chips.ironwood.slice_shapes.0", ("multiple of chips_per_vm (4)", "chips per slice"),
         mutate=_set("chips", "ironwood", "slice_shapes", [6, 16, 32])),
    Case("tiers_out_of_order", "workload.tiers", ("ascending", "tokens"), mutate=_tiers_out_of_order),
    Case("dense_active_ne_total", "model.active_params_b", ("dense model", "billions"), mutate=_del("model", "moe")),
    Case("moe_k_gt_experts", "model.moe.experts_per_token", ("cannot exceed moe.experts (128)", "count"),
         mutate=_set("model", "moe", "experts_per_token", 256)),
    Case("p99_below_p50", "priors.path_latency.0.p99_ms", ("p99 cannot be below p50", "ms"),
         mutate=_set("priors", "path_latency", 0, "p99_ms", 10)),
    # --- field-level schema errors (pydantic, rendered by fleetplan.instance.io)
    Case("negative_rate", "regions.us-east.peak_rps", ("greater than or equal to 0", "requests/s"),
         mutate=_set("regions", "us-east", "peak_rps", -5)),
    Case("string_for_number", "chips.ironwood.hbm_gb", ("valid number", "GB = 1e9 bytes"),
         mutate=_set("chips", "ironwood", "hbm_gb", "lots")),
    Case("missing_required_field", "chips.ironwood.hbm_tbps", ("required field is missing", "TB/s"),
         mutate=_del("chips", "ironwood", "hbm_tbps")),
    Case("misspelt_field", "regions.us-east.peak_rsp", ("unknown field", "spelling"),
         mutate=_rename("regions", "us-east", "peak_rps", "peak_rsp")),
    Case("hourly_load_23_values", "regions.us-west.hourly_load", ("at least 24", "fraction of peak_rps"),
         mutate=lambda d: d["regions"]["us-west"].update(hourly_load=d["regions"]["us-west"]["hourly_load"][:23])),
    Case("percentile_100", "workload.classes.interactive.slos.1.percentile", ("less than 100", "50 <= p < 100"),
         mutate=_set("workload", "classes", "interactive", "slos", 1, "percentile", 100)),
    Case("share_above_1", "workload.input_mix.2.share", ("less than or equal to 1", "fraction"),
         mutate=_set("workload", "input_mix", 2, "share", 1.5)),
    Case("unknown_attention_kind", "model.attention", ("attention kind 'sparse'", "KV bytes per token"),
         mutate=_set("model", "attention", "kind", "sparse")),
    Case("unknown_serving_mode", "serving.mode", ("'disaggregated'", "'colocated'"), mutate=_set("serving", "mode", "split")),
    Case("list_for_mapping", "regions", ("valid dictionary",), mutate=_set("regions", [{"us-east": 1}])),
    Case("bad_region_name", "regions.us east", ("should match pattern",),
         mutate=_rename("regions", "us-east", "us east")),
    Case("non_integer_count", "model.layers", ("valid integer", "count"), mutate=_set("model", "layers", 64.5)),
    Case("nan_rate", "regions.us-east.peak_rps", ("nan", "requests/s"), mutate=_set("regions", "us-east", "peak_rps", float("nan"))),
    Case("inf_hbm", "chips.ironwood.hbm_gb", ("finite number", "GB = 1e9 bytes", "inf"),
         mutate=_set("chips", "ironwood", "hbm_gb", float("inf"))),
    Case("inf_inflation", "priors.tpot_p99_inflation", ("finite number", "dimensionless"),
         mutate=_set("priors", "tpot_p99_inflation", float("inf"))),
    Case("int_beyond_float_range", "model.layers", ("less than or equal to 100000", "count"), mutate=_set("model", "layers", 10**400)),
    Case("bool_for_number", "model.layers", ("boolean", "count"), mutate=_set("model", "layers", True)),
    # keys that look like rich markup or hold a line break are reported verbatim, on one line
    Case("markup_like_key", "regions.us-east.[/peak]", ("unknown field",),
         mutate=_set("regions", "us-east", "[/peak]", 1)),
    Case("newline_in_key", "regions.us-east.peak\\nrps", ("unknown field",),
         mutate=_set("regions", "us-east", "peak\nrps", 1)),
    # --- the document itself
    Case("top_level_list", "(top level)", ("mapping", "got list"), mutate=lambda d: [d]),
    Case("top_level_scalar", "(top level)", ("mapping", "got str"), write=_text("just a string\n")),
    Case("empty_file", "(top level)", ("empty",), write=_text("")),
    Case("comments_only", "(top level)", ("empty",), write=_text("# nothing here\n")),
    # the parser stops on the line after the unclosed '[' (1-based: index + 2)
    Case("yaml_syntax_error", "(yaml)", ("syntax error", f"line {BASE_TEXT.splitlines().index('    peak_rps: 6667') + 2}, column 16"),
         write=_text(BASE_TEXT.replace("    peak_rps: 6667\n", "    peak_rps: [6667\n", 1))),
    Case("duplicate_key", "(yaml)", ("duplicate key 'peak_rps'",),
         write=_text(BASE_TEXT.replace("    peak_rps: 6667\n", "    peak_rps: 6667\n    peak_rps: 7000\n", 1))),
    Case("bad_yaml_date", "(yaml)", ("cannot be converted", "month must be in 1..12"),
         write=_text(BASE_TEXT.replace("name: gemini-ironwood\n", "name: 2024-13-01\n", 1))),
    Case("yaml_too_deep", "(yaml)", ("nests too deeply",), write=_text("name: " + "[" * 1000 + "]" * 1000 + "\n")),
    Case("python_tag", "(yaml)", ("could not determine a constructor",),
         write=_text("name: !!python/object/apply:os.system ['true']\n")),
    Case("not_utf8", "(file)", ("not UTF-8",), write=_text(b"name: \xff\xfe\n")),
    Case("missing_file", "(file)", ("no such file", "gemini-ironwood"), write=lambda tmp: tmp / "does-not-exist.yaml"),
    Case("directory", "(file)", ("directory",), write=lambda tmp: tmp),
]


def _instance_file(case: Case, tmp_path: Path) -> Path:
    if case.write is not None:
        return case.write(tmp_path)
    data = copy.deepcopy(BASE)
    replaced = case.mutate(data)
    if replaced is not None:
        data = replaced
    p = tmp_path / f"{case.id}.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return p


def test_cases_cover_enough_kinds():
    assert len({c.id for c in CASES}) == len(CASES) >= 12


def test_base_instance_is_valid():
    """The mutations start from a good instance, so each case's problems are its own."""
    load_instance(BASE_PATH)
    assert runner.invoke(app, ["perf", str(BASE_PATH), "--json"]).exit_code == 0


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_instance(case: Case, tmp_path: Path):
    path = _instance_file(case, tmp_path)

    # The loader: an InstanceError listing at least one problem, each rendered on one line.
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    problems = info.value.problems
    assert problems
    for p in problems:
        assert "\n" not in p.render() and "\r" not in p.render(), p.render()
    rendered = info.value.render()
    assert len(rendered.splitlines()) == 1 + len(problems)
    # One problem names the field path and says what is expected (with the unit).
    hits = [p.render() for p in problems if case.path in p.render().split(": ", 1)[0]]
    assert hits, f"no problem names {case.path!r}:\n{rendered}"
    assert any(all(s.lower() in h.lower() for s in case.says) for h in hits), f"expected {case.says} in one of {hits}"

    # The CLI: exit code 2, the same lines on stderr, no traceback, nothing on stdout.
    result = runner.invoke(app, ["perf", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    err = result.stderr
    assert err.startswith("error: invalid instance ")
    for p in problems:
        assert f"  - {p.render()}\n" in err, f"{p.render()!r} not in stderr:\n{err}"
    assert case.path in err
