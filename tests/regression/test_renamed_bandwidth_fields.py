"""Issue 15, item 15: the ``*_gbps`` fields held GB/s (bytes), a unit easy to misread as
gigabits/s. They are now ``*_gbytes_per_s``; a file with an old key is refused with a
migration message naming the new key (exit 2), not "unknown field" plus "missing"."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.conftest import tiny_data


def test_old_bandwidth_keys_get_a_migration_message(tmp_path):
    d = tiny_data()
    d["chips"]["acc"]["ici_gbps"] = d["chips"]["acc"].pop("ici_gbytes_per_s")
    d["network"]["kv_ici_gbps_per_slice"] = d["network"].pop("kv_ici_gbytes_per_s_per_slice")
    d["network"]["dcn_gbps_per_slice"] = d["network"].pop("dcn_gbytes_per_s_per_slice")
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(app, ["perf", str(f)])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    for old, new in (("chips.acc.ici_gbps", "ici_gbytes_per_s"), ("network.kv_ici_gbps_per_slice", "kv_ici_gbytes_per_s_per_slice"),
                     ("network.dcn_gbps_per_slice", "dcn_gbytes_per_s_per_slice")):
        assert f"{old}: Renamed to '{new}'" in out
    assert "missing" not in out and "unknown field" not in out
    assert "3 problems" in out


def test_new_keys_carry_bytes_in_their_description():
    from fleetplan.instance.schema import ChipType as Chip, NetworkSpec as Network

    for field in (Chip.model_fields["ici_gbytes_per_s"], Network.model_fields["kv_ici_gbytes_per_s_per_slice"],
                  Network.model_fields["dcn_gbytes_per_s_per_slice"]):
        assert "1e9 bytes/s" in field.description
