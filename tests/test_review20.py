"""review20: a second engineer's review of this session's MLA YaRN, attention backend and learned-position work.

Megatron-LM @ d98e8a64, re-read for the review:
- training/arguments.py L2906-2909: --rope-type (rope, yarn; default None: MLA takes yarn, other attention rope);
  training/argument_utils.py L335-341 hands it to MLATransformerConfig.rope_type, and asserts that attention other
  than MLA takes only rope.
- core/transformer/multi_latent_attention.py L180-198: with rope_type "rope" MLA builds a plain RotaryEmbedding (no
  YaRN frequencies: --rotary-scaling-factor only enters the softmax scale, L177-178); L316 asserts that no rotary
  embedding is passed in, which GPTModel does for --position-embedding-type yarn whatever the attention
  (core/models/gpt/gpt_model.py L196-215, L421-428: the rope and mrope branches exclude MLA, yarn does not).
"""

from __future__ import annotations

import pytest

from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.config.megatron_rules import violations
from btacalc.errors import BtacalcError


def _emit(cli, given: str) -> str:
    code, out, err = cli("plan", *given.split(), "--emit", "megatron")
    assert code in (0, 1), err
    return out


PROXY = "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8"


def test_an_mla_launch_at_rope_type_rope_reads_as_rope_and_lists_the_yarn_flags(cli):
    """--rope-type rope under MLA: the attention builds RoPE, not YaRN, whatever --rotary-scaling-factor says; before,
    the reader took the factor as the preset's YaRN and listed --rope-type as ignored, so re-emitting the read launch
    dropped --rope-type and trained YaRN."""
    launch = _emit(cli, PROXY)
    assert load_preset("deepseek-proxy-megatron-ci").yarn is not None
    read = import_megatron(launch.replace("--position-embedding-type rope",
                                          "--position-embedding-type rope --rope-type rope"), "m.sh")
    assert read.model.yarn is None
    ignored = [flag for flag, _ in read.ignored]
    assert "--rope-type" not in ignored
    assert {"--rotary-scaling-factor", "--mscale-all-dim"} <= set(ignored)
    said = import_megatron(launch.replace("--position-embedding-type rope",
                                          "--position-embedding-type rope --rope-type yarn"), "m.sh")
    assert said.model.yarn == load_preset("deepseek-proxy-megatron-ci").yarn  # yarn is MLA's default, said


def test_an_mla_launch_at_position_embedding_type_yarn_is_refused(cli):
    """GPTModel hands its YaRN embedding to every layer under --position-embedding-type yarn; MLA asserts it is given
    none (multi_latent_attention.py L316). Before, the reader took GPT-OSS's yarn_* flags as the model's YaRN."""
    launch = _emit(cli, PROXY).replace("--position-embedding-type rope", "--position-embedding-type yarn")
    with pytest.raises(BtacalcError, match="multi-latent attention"):
        import_megatron(launch, "m.sh")
    assert not violations({"multi_latent_attention": True, "position_embedding_type": "rope"}, {})


def test_rope_type_yarn_without_mla_is_refused(cli):
    """argument_utils.py L339-341: attention other than MLA takes --rope-type rope only."""
    launch = _emit(cli, "--model gpt2-small --hw h100 --devices 8")
    with pytest.raises(BtacalcError, match="--rope-type"):
        import_megatron(launch.replace("--position-embedding-type", "--rope-type yarn --position-embedding-type"), "m.sh")
    assert import_megatron(launch.replace("--position-embedding-type", "--rope-type rope --position-embedding-type"),
                           "m.sh").model.yarn is None


def test_kimi_k2s_bridge_overrides_set_its_betas_and_read_them_back(cli):
    """MLATransformerConfig's original_max_position_embeddings, beta_fast and beta_slow have no Megatron-LM flag but
    are Bridge model fields (Megatron-Bridge @ 067f987df conversion/model_bridge.py L515-522 maps an MLA model's
    rope_scaling onto them). The launch's note said Bridge sets model.beta_fast, yet --emit bridge left it out (the run
    trained beta_fast 32 where Kimi K2's config.json has 1), and --from-bridge listed a model.beta_fast as ignored."""
    from btacalc.config.bridge_run import import_bridge

    kimi = load_preset("kimi-k2").yarn
    assert kimi is not None and kimi.beta_fast == 1.0
    code, text, err = cli("plan", *"--model kimi-k2 --hw h100 --devices 1024 --pp 16 --ep 64 --etp 1".split(),
                          "--emit", "bridge")
    assert code in (0, 1), err
    lines = set(text.splitlines())
    assert {f"model.beta_fast={kimi.beta_fast}", f"model.beta_slow={kimi.beta_slow}",
            f"model.original_max_position_embeddings={kimi.original_max_position_embeddings}"} <= lines
    read = import_bridge(text, "k.txt", devices=1024)
    assert read.model.yarn == kimi
    assert not [key for key, _ in read.ignored if "beta" in key or "original_max" in key]


def test_an_mla_yarn_without_rounding_names_no_bridge_field(cli, tmp_path):
    """A DeepSeek-style config.json whose rope_scaling says truncate false: MLA builds YarnRotaryEmbedding without
    correction_range_round_to_int (multi_latent_attention.py L190-198), whose default rounds (yarn_rotary_pos_embedding
    .py L63); MLATransformerConfig has no such field. The note named 'model.truncate' as the Bridge field that sets it."""
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).parent / "data" / "kimi-k2.config.json").read_text())
    config["rope_scaling"]["truncate"] = False
    path = tmp_path / "kimi.json"
    path.write_text(json.dumps(config))
    launch = _emit(cli, f"--model {path} --hw h100 --devices 1024 --pp 16 --ep 64 --etp 1")
    note = next(line for line in launch.splitlines() if "multi-latent attention YaRN" in line)
    assert "truncate False" in note and "model.truncate" not in note
    assert "model.beta_fast" in note


def test_every_costs_reference_names_what_costs_py_defines():
    """The split of model/gpu/costs.py into part.py, rates.py and memory_rows.py left docstrings, a data note and docs
    naming costs.matmul_ceiling, costs.Part, costs.GemmRow, costs.gemm_output_bytes, costs.causal_block_fraction,
    costs.attention_kernel_share, costs.new_part (their homes now part.py / rates.py). `costs.X` in the package, its
    data and docs (story.md's history and mutmut's x_ mutant names aside; tests may reach re-exports) names a
    top-level definition of costs.py."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).parent.parent
    tree = ast.parse((root / "btacalc/model/gpu/costs.py").read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    ref = re.compile(r"(?<![A-Za-z_])costs\.([A-Za-z_]+)")
    files = [*root.glob("btacalc/**/*.py"), *root.glob("btacalc/data/*.toml"), root / "README.md",
             *(p for p in root.glob("docs/*.md") if p.name != "story.md")]
    stale = [f"{p.relative_to(root)}:{i}: costs.{m.group(1)}" for p in files
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in ref.finditer(line)
             if m.group(1) != "py" and not m.group(1).startswith("x_") and m.group(1) not in defined and not line[m.end(1):].startswith("` (now")]
    assert stale == []
