"""A measured run given as `megatron_args` is planned as that launch: what the run states beside the launch is
either checked against it or refused, never carried unread (twenty-sixth session).

- The container's TransformerEngine: NVIDIA's NeMo 24.09 release notes list TE 1.10
  (docs.nvidia.com/nemo-framework/user-guide/24.09/softwarecomponentversions.html; btacalc/data/te_releases.toml
  `nemo-24.09`). A run given by its fields takes it from its `release` (planning/measured.py `run_te_version`); a
  launch row with the same release used to be planned at the pinned TE. On Blackwell (compute capability 10.0) TE
  1.x writes the transposed FP8 copies that the pinned TE skips, so the two predictions differ.
- A `recipe` or `router_force_load_balancing` beside a launch was read in part or not at all: refused.
"""

from __future__ import annotations

import json

import pytest

NEMO_24_09_TE = "1.10"  # NVIDIA NeMo 24.09 software component versions: Transformer Engine 1.10


def _launch(cli, extra=()):
    code, launch, err = cli("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--tp", "2",
                            "--precision", "fp8", "--emit", "megatron", *extra)
    assert code in (0, 1) and "--fp8-format" in launch, err
    return launch


def _validate(cli, tmp_path, launch, **fields):
    run = {"id": "r1", "source": "a test launch", "model": "llama-3-8b", "hw": "b200", "devices": 8,
           "precision": "fp8", "seq": 8192, "global_batch": 128, "measured": {"tokens_per_s_per_device": 5000.0},
           "role": "check", "megatron_args": launch, **fields}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    return cli("validate", "--measured", str(path), "--json", "--quiet")


def _plan_rate(cli, tmp_path, launch):
    script = tmp_path / "run.sh"
    script.write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(script), "--hw", "b200", "--devices", "8", "--json")
    assert code in (0, 1), err
    return json.loads(out)["throughput"]["tokens_per_s"] / 8


def test_a_launch_rows_container_te_is_planned(cli, tmp_path):
    batch = ("--global-batch", "128", "--seq", "8192")
    launch = _launch(cli, batch)
    code, out, err = _validate(cli, tmp_path, launch, release="NeMo 24.09")
    assert code in (0, 1), err
    predicted = json.loads(out)["measured"]["runs"][0]["predicted"]["tokens_per_s_per_device"]
    at_release_te = _plan_rate(cli, tmp_path, _launch(cli, (*batch, "--te-version", NEMO_24_09_TE)))
    pinned = _plan_rate(cli, tmp_path, launch)
    assert predicted == pytest.approx(at_release_te, rel=1e-12)
    # TE 1.10 writes every FP8 transpose on Blackwell: the row is slower than at the pinned TE, not equal
    assert predicted < pinned * (1 - 1e-4)


def test_a_launch_whose_te_option_contradicts_its_container_is_refused(cli, tmp_path):
    launch = _launch(cli, ("--global-batch", "128", "--seq", "8192", "--te-version", "2.2.0.dev0+bee4649c"))
    assert "# btacalc option: --te-version 2.2.0.dev0+bee4649c" in launch
    code, out, err = _validate(cli, tmp_path, launch, release="NeMo 24.09")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--te-version 2.2.0.dev0+bee4649c" in err and f"TransformerEngine {NEMO_24_09_TE}" in err


@pytest.mark.parametrize("field, value", [("recipe", {"deterministic_mode": True, "source": "a test recipe"}),
                                          ("router_force_load_balancing", True)])
def test_a_recipe_beside_a_launch_is_refused(cli, tmp_path, field, value):
    launch = _launch(cli, ("--global-batch", "128", "--seq", "8192"))
    code, out, err = _validate(cli, tmp_path, launch, **{field: value})
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{field} beside megatron_args" in err
