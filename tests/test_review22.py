"""review22: a second engineer's review of the tenth session's merged work (docs/story.md 'review22')."""

from __future__ import annotations

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron

# a small GPT as Megatron-LM flags and as the Bridge overrides that name the same fields
ARGS = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50257 --bf16 ")
BRIDGE = ("model.num_layers=12 model.hidden_size=512 model.num_attention_heads=8 model.seq_length=1024 "
          "train.micro_batch_size=4 train.global_batch_size=32 model.vocab_size=50257 mixed_precision=bf16_mixed ")


@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_bridge_transformer_impl_does_not_choose_the_attention_kernel(impl):
    """Megatron-LM's --transformer-impl local builds Megatron-Core's own layers, whose attention is
    DotProductAttention (memci). Bridge's GPTModelProvider builds TransformerEngine's layer spec whatever
    model.transformer_impl says (@ 067f987df gpt_provider.py L120-125 default_layer_spec, L171), so the key is
    listed unread with that reason and the attention stays the fused kernel the overrides otherwise give."""
    bridge = import_bridge(BRIDGE + f"model.transformer_impl={impl}", "overrides", 8)
    plain = import_bridge(BRIDGE, "overrides", 8)
    assert bridge.request.attention == plain.request.attention == "flash"
    reasons = dict(bridge.ignored)
    assert "default_layer_spec" in reasons["model.transformer_impl"]
    launch = import_megatron(ARGS + f"--transformer-impl {impl}", "launch", 8)  # Megatron-LM's reading is memci's
    assert launch.request.attention == ("eager" if impl == "local" else "flash")


SWITCHES_OFF = "".join(f"# environment: {name}=0\n" for name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"))


@pytest.mark.parametrize("environment", ["", SWITCHES_OFF])
def test_a_bridge_local_backend_is_not_told_to_switch_every_kernel_off(environment):
    """Bridge's override model.attention_backend=local is the string 'local': GPTModelProvider swaps in
    DotProductAttention only for AttnBackend.local (gpt_provider.py L278-280 @ 067f987df) and Megatron-Core sets no
    switch for it, so the run keeps TransformerEngine's attention. The lead's note advised NVTE_FLASH_ATTN=0
    NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0 (Megatron-Core's row for the enum), which leaves TE no kernel, and said
    nothing once the file set them; the note now says no environment makes the run local, with or without them."""
    run = import_bridge(environment + BRIDGE + "model.attention_backend=local", "overrides", 8)
    assert run.request.attention == "eager"  # planned as given
    said = [n for n in run.notes if "attention_backend=local" in n]
    assert len(said) == 1 and "no NVTE_* environment makes it local" in said[0] and "L278" in said[0]
    assert not any("NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0" in n for n in run.notes)
