"""review27: README numbers that no test pinned, each derived here from the files the tool reads (the catalogue,
the goldens' grid, a hardware profile, the shipped run file, calibration.toml), never from btacalc's output."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

from tests.support import readme_prose as _prose, readme_quote as _quote, readme_table_errors as _table_errors

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"



def test_catalogue_term_count_is_the_formula_files():
    # README said "all 332 terms are pinned"; the catalogue holds 346 [[phase.term]] tables today
    said = int(_quote(r"Catalogue: all ([\d,]+) terms are pinned").group(1).replace(",", ""))
    count = sum(len(phase.get("term", [])) for f in sorted((ROOT / "formulas").glob("*.toml"))
                for phase in tomllib.loads(f.read_text(encoding="utf-8")).get("phase", []))
    assert said == count


def test_golden_grid_is_the_goldens_test():
    # README said "12 models x 6 selections x 3 shapes"; the lists in tests/test_goldens.py, read as text
    models, selections, shapes, extra = _quote(r"every catalogue quantity for (\d+) models × (\d+) selections × "
                                               r"(\d+) shapes \((\d+) more selections on Llama 3 8B\)").groups()
    src = (ROOT / "tests" / "test_goldens.py").read_text(encoding="utf-8")

    def block(name: str, close: str) -> str:
        return src.split(f"\n{name} = ", 1)[1].split(close, 1)[0]

    assert int(models) == len(re.findall(r'"[\w:.+-]+"', block("MODELS", "]\n")))
    assert int(selections) == block("SELECTIONS", "\n]\n").count("dict(")
    assert int(shapes) == block("SHAPES", "]\n").count("(")
    llama = src.split('"data:llama-3-8b.config.json": [', 1)[1].split("],\n", 1)[0]
    assert int(extra) == llama.count("dict(")


def test_flash_attention_key_block_is_the_h100_profiles_shared_memory():
    # Dao et al. 2022 Algorithm 1: B_c = ceil(M / 4d), M the on-chip memory in elements (2-byte elements here);
    # README said B_c = 228 (the 228 KB per SM), the profile gives 227 KB per thread block
    kb, elements, b_c = _quote(r"an H100 \(M = (\d+) KB = ([\d,]+) two-byte elements, B_c = (\d+);").groups()
    profile = tomllib.loads((ROOT / "hardware_profiles" / "h100.toml").read_text(encoding="utf-8"))
    m_bytes = profile["chip"]["shared_memory_bytes_per_core"]["value"]
    assert int(kb) * 1024 == m_bytes
    assert int(elements.replace(",", "")) == m_bytes // 2
    assert int(b_c) == math.ceil((m_bytes // 2) / (4 * 128))


def _runs() -> list[dict]:
    return json.loads((ROOT / "btacalc" / "data" / "measured_runs.json").read_text(encoding="utf-8"))["runs"]




def test_the_16_bit_2026_rows_are_the_ones_the_sentence_names():
    # "The 16-bit 2026 rows (+x%, 9 runs) ...: seven of them ... (+a% to +b%) ...; the other two ... read +c% and d%"
    low, high, c, d = (float(x) for x in _quote(
        r"seven of them are Megatron-LM's CI test \(two rows\), two Megatron-Bridge MoE comparisons, Megatron-LM's "
        r"Qwen3-30B-A3B H100 recipe, GPT-OSS on B200 and Megatron-MoE-ModelZoo's EP-overlapped Qwen3-235B H100 row "
        r"\(([+-][\d.]+)% to ([+-][\d.]+)%\), each with its own open miss; the other two, NeMo AutoModel's Llama 3 70B "
        r"on 64 H100 and Qwen3-235B on 256 GB200 from Megatron-MoE-ModelZoo, read ([+-][\d.]+)% and "
        r"([+-][\d.]+)%").groups())
    errors = _table_errors()
    rows = {r["id"]: errors[r["id"]] for r in _runs()
            if r["role"] == "check" and r["hw"] not in ("wse2", "wse3") and r.get("precision") in ("bf16", "fp16")
            and r.get("software_date", "").startswith("2026") and not r.get("known_gap") and r["id"] in errors}
    assert len(rows) == 9
    ci = [v for k, v in rows.items() if "megatron-ci" in k]
    recipe = [v for k, v in rows.items() if k.endswith("-mlmrecipes")]
    bridge = [v for k, v in rows.items() if "Megatron-Bridge" in next(r["source"] for r in _runs() if r["id"] == k)
              and k.startswith("qwen3-30b-a3b")]
    oss = [v for k, v in rows.items() if k.startswith("gpt-oss")]
    overlapped = [v for k, v in rows.items() if "mzoo" in k and "a2aovl" in k]
    six = ci + bridge + recipe + oss + overlapped
    assert (len(ci), len(bridge), len(recipe), len(oss), len(overlapped)) == (2, 2, 1, 1, 1)
    assert (min(six), max(six)) == (low, high)
    other = sorted(v for v in rows.values() if v not in six)
    assert other == sorted([c, d])
    assert [k for k, v in rows.items() if v == c][0].startswith("llama-3-70b-h100-64")
    assert [k for k, v in rows.items() if v == d][0].startswith("qwen3-235b-a22b-gb200-256")


def _starved_wafer_folds() -> tuple[set[str], set[str], list[dict], int]:
    """calibration.toml: the wse family's factors are fitted on its role=fit runs, and never more factors than fit
    runs (planning/calibration.fit_family); a leave-one-model-family-out fold refits on the other families' fit
    runs, so a fold that leaves fewer fit runs than factors keeps the shipped factors. Returns the model families
    whose fold is so starved, the families holding fit runs, the wafer runs of the starved families (not held out)
    and the number of factors."""
    calib = tomllib.loads((ROOT / "btacalc" / "data" / "calibration.toml").read_text(encoding="utf-8"))
    wse = next(f for f in calib["family"] if f["name"] == "wse")
    wafer = [r for r in _runs() if r["hw"] in wse["profiles"] and r["measured"].get("tokens_per_s_per_device")]
    family = {r["model"]: next((f for f, ms in calib["model_families"].items() if r["model"] in ms), r["model"])
              for r in wafer}
    fit_families = {family[r["model"]] for r in wafer if r["role"] == "fit"}
    starved = {fam for fam in fit_families
               if sum(r["role"] == "fit" and family[r["model"]] != fam for r in wafer) < len(wse["factors"])}
    return starved, fit_families, [r for r in wafer if family[r["model"]] in starved], len(wse["factors"])


def test_five_cs2_runs_are_not_held_out_in_cross_validation():
    starved, fit_families, not_held_out, factors = _starved_wafer_folds()
    assert starved == fit_families == {"llama", "bert-large"}
    n, fit = _quote(r"so with BERT-large or LLaMA out one or two fit runs are left for three factors \(a fit needs as "
                    r"many\), and those (\w+) CS-2 runs \(the (\w+) fit runs among them\)").groups()
    words = {"three": 3, "five": 5}
    assert (words[n], words[fit]) == (len(not_held_out), sum(r["role"] == "fit" for r in not_held_out))
    assert {r["hw"] for r in not_held_out} == {"wse2"} and factors == 3


def test_te_fused_cross_entropy_run_counts_are_the_run_files():
    # README said "the 68 runs with TransformerEngine's fused cross-entropy ... 38 of them the Megatron-Bridge rows";
    # the three Llama 3 70B SFT rows (Megatron-Bridge, newruns) came after: a run states the fusion in its recipe
    n, bridge = _quote(r"the (\d+) runs with TransformerEngine's fused cross-entropy are planned with it "
                       r"\(\[docs/loss-te-fused\.md\]\(docs/loss-te-fused\.md\); (\d+) of them the "
                       r"Megatron-Bridge rows").groups()
    te = [r for r in _runs() if (r.get("recipe") or {}).get("cross_entropy_fusion_impl") == "te"
          and (r.get("recipe") or {}).get("cross_entropy_loss_fusion")]
    assert int(n) == len(te)
    assert int(bridge) == sum("megatron-bridge" in r["source"].lower() for r in te)


def test_the_shipped_expected_errors_say_which_runs_are_not_held_out():
    # the same derivation, against btacalc/data/expected_error.json's per-run flag (review27 finding 5): a wafer run
    # whose model family starves its fold is predicted with the shipped factors, and the file says so
    expected = sorted(r["id"] for r in _starved_wafer_folds()[2])
    shipped = json.loads((ROOT / "btacalc" / "data" / "expected_error.json").read_text(encoding="utf-8"))["runs"]
    assert sorted(r["id"] for r in shipped if not r.get("held_out", True)) == expected
    assert len(expected) == 5


def test_a_wafer_plans_expected_error_counts_them(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert code in (0, 1), err
    x = json.loads(out)["throughput"]["expected_error"]
    assert (x["runs"], x["not_held_out"]) == (12, 5)
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    assert "5 of them with the shipped factors" in " ".join(out.split())
