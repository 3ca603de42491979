"""gelu: ungated (GeLU) MoE experts as Megatron-Core builds them without --swiglu (issue 21; docs/memory.md "gelu",
docs/story.md "gelu"; the CI memory rows whose experts are GeLU are tests/test_memci_gelu.py).

Megatron-LM @ d98e8a64 megatron/core/transformer/moe/experts.py: TEGroupedMLP's fc1 has moe_ffn_hidden_size columns,
doubled only under gated_linear_unit (L212-224), fc2 contracts them (L236-247); SequentialMLP's experts are MLPs of
the same width (L1425-1450, mlp.py L201-213). Without --swiglu the activation is GeLU, then the routing weight
multiplies its output (L1012-1016, mlp.py L335-341) and fc2 keeps the product (L1028). The expected numbers below
are derived by hand from those lines, not read from btacalc."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset, resolve_model, validate_model
from btacalc.model.problem import make_problem
from tests.support import emitted

# the CI's toy MoE GPT (f: Megatron-LM's --swiglu default int(4h x 2/3 / 64) x 64, hostile34)
h, f, V = 512, 1344, 50257


def _gelu(preset="moe-toy-megatron-ci", **changes):
    """A SwiGLU MoE preset with ungated GeLU experts (and `changes`)."""
    data = {**resolve_model(preset).model_dump(), "published_params": None, "mlp": "gelu", **changes}
    return validate_model({**data, "name": f"{preset} (gelu experts)"}, "test")


def _values(model, s=1024, b=2, G=1, **run):
    options = dict(recompute="none", attention="flash", accounting="ideal", routing_weights="experts") | run
    problem = make_problem(model, resolve_hardware("wse3"), RunOptions(seq_len=s, **options))
    (_, pv), *_ = problem.evaluate(G, b).layers
    return pv


# --- the model ----------------------------------------------------------------------------------------------------

def test_an_moe_model_with_gelu_experts_is_accepted():
    """The refusal "MoE experts are modelled as SwiGLU only" is gone: one activation for the model's MLPs and experts,
    as Megatron-Core's one TransformerConfig gives them."""
    model = _gelu()
    assert model.is_moe and model.mlp == "gelu"


def test_a_gelu_expert_has_two_h_by_f_matrices_and_a_swiglu_expert_three():
    """E x 2hf for fc1 (h x f) and fc2 (f x h), against E x 3hf gated; with biases (Megatron's --add-bias-linear)
    fc1's f and fc2's h per expert."""
    E = 4
    gelu, swiglu = _values(_gelu()), _values(resolve_model("moe-toy-megatron-ci"))
    assert gelu.value("experts", "params") == E * 2 * h * f
    assert swiglu.value("experts", "params") == E * 3 * h * f
    biased = _values(_gelu(expert_bias=True))
    assert biased.value("experts", "params") == E * (2 * h * f + f + h)


def test_a_gelu_expert_runs_two_matmuls_per_routed_copy():
    """Forward 2 x (kT x h x f) matmuls = 4kThf FLOP; backward twice that (Korthikanti App. A)."""
    for k, E in ((1, 4), (2, 8)):
        model = _gelu(num_experts=E, top_k=k)
        s, b = 1024, 2
        pv = _values(model, s=s, b=b)
        assert pv.value("experts", "flops_fwd") == 4 * k * s * b * h * f
        assert pv.value("experts", "flops_bwd") == 2 * 4 * k * s * b * h * f


def test_a_gelu_expert_keeps_its_input_output_and_weighted_output_per_routed_copy():
    """Per routed copy (bf16, beta = 2) Megatron's ungated expert keeps the GeLU input (f), the GeLU output (kept by
    its product with the routing weight, f), the product fc2 reads (f) and the weight (4 B at most): 3·2f + 4 B,
    the same as the weighted SwiGLU's [gate, up] (2f) + fc2 input (f) + weight. With the weight applied after the
    experts (routing_weights combine) only the input and output remain, 2·2f B; under moe_act recomputation the
    GeLU input and the weight, 2f + 4 B, where SwiGLU keeps 2·2f + 4 B."""
    s, b, k = 1024, 2, 1
    copies = k * s * b
    gelu, swiglu = _gelu(), resolve_model("moe-toy-megatron-ci")
    assert _values(gelu).value("experts", "stored") == copies * (3 * 2 * f + 4)
    assert _values(swiglu).value("experts", "stored") == copies * (3 * 2 * f + 4)
    assert _values(gelu, routing_weights="combine").value("experts", "stored") == copies * 2 * 2 * f
    act = dict(recompute="moe_act")
    assert _values(gelu, **act).value("experts", "stored") == copies * (2 * f + 4)
    assert _values(swiglu, **act).value("experts", "stored") == copies * (2 * 2 * f + 4)


def test_megatrons_ungated_expert_function_keeps_what_the_catalogue_counts():
    """experts.py L1012-1016 and L1028 transcribed (F.gelu, the product with fp32 routing weights cast back, a
    linear fc2) and measured under torch's saved-tensor hooks: the catalogue's experts phase, ideal accounting with
    the weights inside the experts, less fc1's input (the dispatch phase's)."""
    torch = pytest.importorskip("torch")
    hidden, ff, k, s = 16, 40, 2, 48
    model = _gelu(hidden_size=hidden, head_dim=2, ffn_size=ff, top_k=k)
    n = k * s  # routed copies of one sequence
    fc1 = torch.nn.Linear(hidden, ff, bias=False, dtype=torch.bfloat16)
    fc2 = torch.nn.Linear(ff, hidden, bias=False, dtype=torch.bfloat16)
    x = torch.randn(n, hidden, dtype=torch.bfloat16)
    probs = torch.rand(n, 1, dtype=torch.float32, requires_grad=True)
    weights = {p.data_ptr() for p in (*fc1.parameters(), *fc2.parameters())}
    saved: dict[int, int] = {}

    def pack(t):
        if t.data_ptr() not in weights:
            saved[t.data_ptr()] = t.numel() * t.element_size()
        return t

    fc1_output = fc1(x)  # outside the hooks: fc1 keeps x, counted in the dispatch phase
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        act = torch.nn.functional.gelu(fc1_output)
        weighted = (act * probs).to(act.dtype)
        fc2(weighted).sum().backward()
    assert sum(saved.values()) == _values(model, s=s, b=1).value("experts", "stored") == n * (3 * 2 * ff + 4)


def test_the_grouped_gemms_of_gelu_experts_are_f_wide():
    """Qwen3-30B-A3B's shape with GeLU experts on EP 8 (E = 128, k = 8, f = 768, h = 2048; a sequence of 4096 per
    rank): fc1 is one f-wide GEMM per local expert (W_1, n = f = 768; SwiGLU's W_gate_up is 2f), fc2 contracts f;
    each expert receives k·T·EP/E = 2,048 tokens."""
    from btacalc.model.gpu.costs import layer_parts

    model = _gelu("qwen3-30b-a3b")
    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4)
    p = make_problem(model, resolve_hardware("h100"), run, Layout(devices=8, expert_parallel=8))
    rows = {g.name: g for g in layer_parts(p, p.evaluate(1, 1))[0].gemms["experts"]}
    assert set(rows) == {"W_1", "W_down"}
    assert (rows["W_1"].m, rows["W_1"].n, rows["W_1"].k) == (pytest.approx(2048), pytest.approx(768),
                                                             pytest.approx(2048))
    assert (rows["W_down"].n, rows["W_down"].k) == (pytest.approx(2048), pytest.approx(768))


def test_gelu_shared_experts_are_an_ungated_mlp_of_width_f_s():
    """SharedExpertMLP is an MLP of moe_shared_expert_intermediate_size (shared_experts.py L102-130): 2·h·f_s
    parameters, 4·T·h·f_s forward FLOP, the GeLU input and output kept (2·2·f_s B a token; no routing weight)."""
    model = _gelu(shared_expert_size=1024)
    s, b = 1024, 2
    pv = _values(model, s=s, b=b)
    assert pv.value("shared_experts", "params") == 2 * h * 1024
    assert pv.value("shared_experts", "flops_fwd") == 4 * s * b * h * 1024
    assert pv.value("shared_experts", "stored") == s * b * 2 * 2 * 1024


# --- PyTorch reference layers (btacalc.torchref), as tests/test_torchref.py checks the SwiGLU blocks ----------------

SMALL = dict(hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=100, ffn_size=24,
             num_experts=8, top_k=2, mlp="gelu", published_params=None)


@pytest.mark.parametrize("changes, kinds", [
    ({}, ("decoder",)),
    ({"shared_expert_size": 32, "shared_expert_gate": True, "expert_bias": True}, ("decoder",)),
    ({"first_dense_layers": 1, "dense_ffn_size": 40, "shared_expert_size": 24}, ("dense", "moe")),
])
@pytest.mark.parametrize("batch, seq, tiles", [(2, 12, 1), (4, 8, 2)])
def test_gelu_experts_small_real_layers_match_phase_by_phase(changes, kinds, batch, seq, tiles):
    """The decoder reference with GeLU experts (fc2(gelu(fc1(x))) per expert, HF-style weights after the experts),
    its shared expert and dense layer: pytorch accounting and forward FLOPs exact phase by phase."""
    pytest.importorskip("torch")
    from btacalc.torchref.accuracy import compare_layer

    model = validate_model({**resolve_model("qwen3-30b-a3b").model_dump(), **SMALL, **changes,
                            "name": "gelu-experts-small"}, "test")
    for kind in kinds:
        c = compare_layer(model, batch, seq, tiles, "eager", fake=False, kind_name=kind)
        for r in c.phases:
            assert (r.pytorch_bytes, r.formula_flops_forward) == (r.measured_bytes, r.measured_flops_forward), (kind, r)
        assert c.measured_flops_backward == c.formula_flops_backward


# --- launches in and out --------------------------------------------------------------------------------------------

LAUNCH = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
          "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50257 --bf16 --num-experts 4 --moe-router-topk 1 --moe-router-pre-softmax "
          "--expert-model-parallel-size 2 --disable-bias-linear --moe-grouped-gemm")


def test_a_megatron_moe_launch_without_swiglu_is_planned_with_gelu_experts():
    imported = import_megatron(LAUNCH, "launch", 8)
    assert imported.model.is_moe and imported.model.mlp == "gelu"
    swiglu = import_megatron(LAUNCH + " --swiglu", "launch", 8)
    assert swiglu.model.mlp == "swiglu"


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
def test_a_gelu_expert_plan_emits_no_gated_unit_and_reads_back(cli, tmp_path, emit):
    """--emit megatron writes no --swiglu, --emit bridge model.gated_linear_unit=False; each reads back as the same
    GeLU-expert model."""
    text = emitted(cli, "--model moe-toy-gelu-megatron-ci --hw h100 --devices 8 --ep 2", emit)
    if emit == "megatron":
        assert "--num-experts 4" in text and "--swiglu" not in text
        back = import_megatron(text, "emitted", 8)
    else:
        assert "model.gated_linear_unit=False" in text and "model.num_moe_experts=4" in text
        back = import_bridge(text, "emitted", 8)
    preset = load_preset("moe-toy-gelu-megatron-ci")
    assert (back.model.mlp, back.model.num_experts, back.model.top_k, back.model.ffn_size) == ("gelu", 4, 1, 4 * h)  # GeLU: 4h
    assert back.model.num_layers == preset.num_layers and back.model.hidden_size == preset.hidden_size


# --- biases: what Megatron-Core takes (moe/experts.py L205-207, L982-985; mlp.py L296-298) ---------------------------

BIASED = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
          "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50257 --bf16 --num-experts 4 --moe-router-topk 1 --moe-router-pre-softmax "
          "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1")


def test_biased_gelu_experts_need_the_fused_bias_gelu_off(cli, tmp_path):
    """Megatron keeps --add-bias-linear by default and with it the fused bias-GeLU, which neither expert class runs
    with a routing weight: refused in one line unless --no-bias-gelu-fusion, with and without grouped GEMM."""
    path = tmp_path / "launch.sh"
    for extra in ("", " --moe-grouped-gemm --no-bias-dropout-fusion"):
        path.write_text(BIASED + extra)
        code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(path))
        assert code == 2 and out == "" and err.count("\n") == 1 and "--no-bias-gelu-fusion" in err, err
        model = import_megatron(BIASED + extra + " --no-bias-gelu-fusion", "launch", 8).model
        assert model.mlp == "gelu" and model.expert_bias
    assert import_megatron(BIASED + " --swiglu", "launch", 8).model.expert_bias  # SwiGLU's fused kernel takes them


def test_biased_grouped_experts_need_the_fused_bias_dropout_off(cli, tmp_path):
    """TEGroupedMLP (--moe-grouped-gemm under TransformerEngine) asserts no biases with the fused bias-dropout-add;
    the local implementation builds SequentialMLP, which does not."""
    launch = BIASED + " --swiglu --moe-grouped-gemm"
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(path))
    assert code == 2 and out == "" and "--no-bias-dropout-fusion" in err, err
    assert import_megatron(launch + " --no-bias-dropout-fusion", "launch", 8).model.expert_bias
    assert import_megatron(launch + " --transformer-impl local", "launch", 8).model.expert_bias


@pytest.mark.parametrize("given, flags", [
    ("--model gpt-oss-20b --hw h100 --devices 8 --ep 8 --etp 1", ("--no-bias-dropout-fusion",)),
    ("--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8", ()),
])
def test_a_biased_moe_plan_emits_the_fusions_megatron_needs_off(cli, given, flags):
    launch = emitted(cli, given)
    assert "--moe-grouped-gemm" in launch and "MEGATRON WOULD REFUSE" not in launch
    assert all(flag in launch for flag in flags)
    assert ("--no-bias-dropout-fusion" in launch) == bool(flags) and "--no-bias-gelu-fusion" not in launch


def test_a_biased_gelu_expert_launch_reads_back_and_emits_both_fusions_off(cli, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(BIASED + " --no-bias-gelu-fusion")
    code, launch, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(path), "--emit", "megatron")
    assert code in (0, 1), err
    assert "--no-bias-gelu-fusion" in launch and "--no-bias-dropout-fusion" in launch and "--swiglu" not in launch
    assert "MEGATRON WOULD REFUSE" not in launch
    back = import_megatron(launch, "emitted", 8).model
    assert back.mlp == "gelu" and back.expert_bias


def test_a_bridge_file_takes_transformer_configs_fusion_defaults(cli, tmp_path):
    """Bridge builds TransformerConfig, whose bias_activation_fusion and bias_dropout_fusion default off
    (transformer_config.py L496, L510), unlike Megatron-LM's flags: a biased GeLU-expert file that leaves them out is
    planned; one that turns the fused bias-GeLU on is refused, naming the Bridge key."""
    path = tmp_path / "launch.sh"
    path.write_text(BIASED + " --no-bias-gelu-fusion")
    code, text, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(path), "--emit", "bridge")
    assert code in (0, 1) and "model.bias_activation_fusion=False" in text, err
    left_out = "\n".join(line for line in text.splitlines() if "bias_activation_fusion" not in line
                         and "bias_dropout_fusion" not in line)
    assert import_bridge(left_out, "bridge", 8).model.expert_bias
    (tmp_path / "on.txt").write_text(text.replace("model.bias_activation_fusion=False",
                                                  "model.bias_activation_fusion=True"))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", str(tmp_path / "on.txt"))
    assert code == 2 and out == "" and "model.bias_activation_fusion=False" in err, err
