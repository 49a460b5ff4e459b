"""`--placement` drives `tcl sim`: TCluster's Table 3 through the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tcluster.cli.main import main

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "tcluster-table3.yaml"


@pytest.mark.parametrize("placement,pending,free_mib", [
    ("first-fit", ["j08", "j09"], [547, 351, 658, 259, 355]),
    ("anbf", [], [47, 51, 258, 59, 55]),
])
def test_table3_through_tcl_sim(placement: str, pending: list[str], free_mib: list[int],
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", str(SCENARIO), "--fairness", "fifo", "--placement", placement, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [j["name"] for j in out["jobs"] if j["tasks_running"] == 0] == pending
    assert [round(n["free"]["memory"] / 2**20) for n in out["nodes"]] == free_mib
    assert out["metrics"]["placement"] == placement


def test_unknown_placement_in_tcl_sim_lists_the_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", str(SCENARIO), "--placement", "best"]) == 2
    err = capsys.readouterr().err
    assert "anbf" in err and "first-fit" in err
