"""review34: a hostile campaign on the sixteenth session's options (seventeenth session). docs/story.md "review34"
says what each test pins and what happened before. The one-line refusals are cases in tests/test_bad_input.py.
The thirty-fifth session's review34 (a second engineer's review of that session's merged work) adds its findings at
the end (F1...)."""

from __future__ import annotations

import pytest

from support import one_line_error


def test_a_sweep_that_fails_to_write_does_not_say_it_wrote(cli, tmp_path, monkeypatch):
    """`sweep --csv /dev/full -o new.json` printed "written to .../new.json (--output)", then failed on the CSV with
    exit 2 and wrote neither file: the summary now prints once the streamed files are closed."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("sweep", "-q", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--vary",
                         "seq=1024,2048", "--csv", "/dev/full", "-o", "new.json")
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1
    assert "written to" not in out and not (tmp_path / "new.json").exists()
    code, out, _ = cli("sweep", "-q", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--vary",
                       "seq=1024,2048", "--csv", "s.csv", "-o", "new.json")
    assert code == 0 and "2 points, 2 fit; written to" in out
    assert (tmp_path / "new.json").is_file() and (tmp_path / "s.csv").is_file()


def test_no_search_suggestion_under_pytorch_fsdp(cli):
    """review34 #6: under PyTorch's 1-D FSDP the search keeps TP, PP and CP at 1, so "What would fit" no longer points
    at `--search` for the tensor and pipeline layouts it cannot try; a Megatron layout still gets it."""
    code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100-96gb", "--devices", "8", "--fsdp",
                         "--fsdp-impl", "fsdp2", "--recompute", "op")
    assert code == 1 and "What would fit" in out and "--search" not in out, err
    code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100-96gb", "--devices", "8", "--zero", "1")
    assert code == 1 and "--search finds the fastest Megatron layout" in " ".join(out.split()), err


def test_megatron_recompute_module_op_is_megatrons_refusal(cli, tmp_path):
    """review34 #7: a launch's `--recompute-modules op` was refused with btacalc's torchtitan wording; Megatron-Core
    refuses it as a module outside its list (transformer_config.py L1943-1962 @ d98e8a64)."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--emit", "megatron")
    path = tmp_path / "run.sh"
    path.write_text(out.replace("    --mock-data", "    --recompute-granularity selective --recompute-modules op \\\n"
                                                  "    --mock-data"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "Megatron-Core refuses modules outside core_attn" in err and "torchtitan" not in err


# thirty-fifth session, review34: a second engineer's review of `git diff e059d608..main`
# F1: the session opened --te-version to fp8-blockwise and mxfp8 (the attention projection's quantised copy of O
# depends on the release), and hostile42 refused a TE older than NVFP4 under nvfp4 only: `--precision mxfp8
# --te-version 1.10` (or 2.0) and `--precision fp8-blockwise --te-version 2.2` were planned on a TransformerEngine with
# which Megatron-Core builds no such recipe. Megatron-LM @ d98e8a64 megatron/core/fp8_utils.py L768-803 builds a recipe
# other than delayed scaling only from TE 2.1.0, Float8CurrentScaling from 2.2.0.dev0 and Float8BlockScaling from
# 2.3.0.dev0; older, it asserts "Please make sure to use TransformerEngine version >= 2.2.0.dev0 for
# Float8CurrentScaling, >= 2.1.0 for MXFP8BlockScaling, and >= 2.3.0.dev0 for Float8BlockScaling".
PLAN = ("plan", "--model", "llama-3-8b", "--devices", "8", "--tp", "1", "--pp", "1", "--global-batch", "8",
        "--micro-batch", "1")


@pytest.mark.parametrize("hw, precision, te, needs", [
    ("b200", "mxfp8", "1.10", "2.1.0"), ("b200", "mxfp8", "2.0", "2.1.0"),
    ("h100", "fp8-blockwise", "2.2", "2.3.0.dev0"), ("h100", "fp8-blockwise", "2.2.0", "2.3.0.dev0"),
    ("b200", "fp8-current", "2.1", "2.2.0.dev0"), ("h100", "fp8-current", "1.10", "2.2.0.dev0"),
    ("b200", "nvfp4", "2.6.0.dev0", "2.7.0.dev0")])
def test_a_te_older_than_the_recipe_is_refused(cli, hw, precision, te, needs):
    code, out, err = cli(*PLAN, "--hw", hw, "--precision", precision, "--te-version", te)
    one_line_error(code, out, err, f"needs TransformerEngine {needs} or later")


@pytest.mark.parametrize("hw, precision, te", [
    ("b200", "mxfp8", "2.1.0"), ("h100", "fp8-blockwise", "2.3.0.dev0"), ("b200", "fp8-current", "2.2.0.dev0+bee4649c"),
    ("h100", "fp8-current", "2.5"), ("b200", "fp8", "1.10"), ("b200", "nvfp4", "2.14")])
def test_a_te_from_the_recipe_on_is_planned(cli, hw, precision, te):
    # delayed scaling (fp8) runs under TE 1.x: Megatron-Core builds TEDelayedScaling under every release (L796-806)
    code, out, err = cli(*PLAN, "--hw", hw, "--precision", precision, "--te-version", te)
    assert code in (0, 1) and "needs TransformerEngine" not in err, err


# F3 (a test the session's change lacked): planning/measured.py now gives a measured run its container's TE wherever
# the release changes the plan (Recipe.te_release_decides_on), so a Hopper current-scaling run from a container whose
# TE predates 2.6.0.dev0 keeps the projection's quantised copy of O (Megatron-LM @ d98e8a64 attention.py L428-444).
# No shipped row is such a run, so reverting that line moved no test. te_releases.toml names NeMo 25.04's TE as
# 2.2.0.dev0+bee4649c (NeMo v2.3.0 requirements/manifest.json).
def test_a_hopper_current_scaling_run_takes_its_containers_te():
    from btacalc.planning.measured import express
    from btacalc.planning.run_file import load_runs

    run = next(r for r in load_runs() if r.id == "llama-3-8b-h100-8-fp8-current-249")
    assert run.megatron_args is None and (run.recipe is None or run.recipe.transformer_engine is None)
    request, why = express(run.model_copy(update={"release": "NeMo 25.04"}))
    assert request is not None, why
    assert request.te_version == "2.2.0.dev0+bee4649c"
