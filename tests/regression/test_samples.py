"""Issue 15, item 12: the docs pointed users at ``shared/data/`` for sample traces and
profiles, which a user of the package does not have. fleetplan now ships a trace with
prefix hashes and a latency profile (package data, with their licences and sources),
names them ``sample:NAME`` on the command line, and no documented command needs the
development tree's data directory."""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import re
import tomllib
from itertools import islice
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.samples import SAMPLES, sample_path
from tests.workload.conftest import MOONCAKE

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_sample_is_shipped_small_with_its_licence_and_source():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fleetplan.samples"]
    sources = (sample_path("mooncake").parent / "SOURCES.md").read_text()
    total = 0
    for s in SAMPLES.values():
        p = sample_path(s.name)
        lic = p.with_name(s.licence_file)
        assert p.is_file() and lic.is_file(), s.name
        for f in (p, lic):
            assert any(fnmatch.fnmatch(f.name, g) for g in globs), f"{f.name} is not package data"
        assert f"`sample:{s.name}`" in sources and s.file in sources and s.licence_file in sources
        total += p.stat().st_size
    assert total < 600_000  # well under 1 MB
    assert "Apache License" in sample_path("mooncake").with_name("LICENSE-Apache-2.0.txt").read_text()


def test_the_mooncake_sample_is_the_traces_first_3000_lines():
    with gzip.open(sample_path("mooncake"), "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == "a84c73ade67ccecd1972e6d4d048178ae336380efcaa59bb7912161c8fc30ba2"  # as SOURCES.md says
    lines = data.splitlines()
    assert len(lines) == 3000 and all("hash_ids" in json.loads(x) for x in lines[:5])
    if MOONCAKE.exists():  # the public trace it was cut from, where the data directory is at hand
        with open(MOONCAKE, "rb") as f:
            assert b"".join(islice(f, 3000)) == data


def test_workload_fit_and_calibrate_take_sample_names(tmp_path):
    out = tmp_path / "w.yaml"
    r = runner.invoke(app, ["workload", "fit", "sample:mooncake", "--cache-gb", "1024", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(out.read_text())
    assert doc["source"]["trace"] == "sample:mooncake" and doc["source"]["requests"] == 3000  # portable, not the install path
    assert 0 < doc["workload"]["prefix_hit_rate"] < 1 and len(doc["workload"]["tiers"]) == 2
    pri = tmp_path / "p.yaml"
    r = runner.invoke(app, ["calibrate", "sample:splitwise", "--model", "llama2-70b", "--chip", "a100-80gb", "--tp", "8", "-o", str(pri)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(pri.read_text())
    assert doc["source"]["profile"] == "sample:splitwise"
    # the whole Splitwise file ships unchanged: the fit is docs/calibration.md's A100 TP 8 row
    # (net of the TP all-reduces, held at the default collective priors since issue 17)
    assert (doc["priors"]["prefill_mfu"], doc["priors"]["hbm_bw_fraction"], doc["priors"]["decode_mfu"]) == (0.5215, 0.7181, 0.0984)


def test_samples_lists_them_and_a_wrong_name_is_bad_input():
    r = runner.invoke(app, ["samples", "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["name"]: x for x in json.loads(r.stdout)["samples"]}
    assert set(rows) == {"sample:mooncake", "sample:splitwise"}
    assert Path(rows["sample:mooncake"]["path"]).is_file() and rows["sample:splitwise"]["licence"] == "MIT"
    r = runner.invoke(app, ["workload", "fit", "sample:azure"])
    assert r.exit_code == 2 and "no such sample" in r.output and "sample:mooncake" in r.output


def test_no_documented_command_needs_the_development_data_directory():
    blocks = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks += [(page.name, b) for b in re.findall(r"```[^\n]*\n(.*?)```", page.read_text(), flags=re.S)]
    bad = [(name, line) for name, b in blocks for line in b.splitlines() if "fleetplan " in line and "shared/" in line]
    assert not bad, bad
    assert any("sample:mooncake" in b for _, b in blocks) and any("sample:splitwise" in b for _, b in blocks)
