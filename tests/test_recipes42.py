"""recipes42: every Megatron-Bridge performance recipe for H100, B200 and GB200 at Bridge 067f987d that btacalc
models plans and fits with the recipe's own settings (docs/recipes42.md).

Each case is the recipe's settings as data: the layout, batch, sequence, precision, recomputation, CUDA-graph scopes,
dispatcher, overlaps, offloading and optimizer options that NVIDIA-NeMo/Megatron-Bridge@067f987d sets for it, cited
as file and lines under src/megatron/bridge/ (perf_recipes/... is the flat perf recipe; recipes/... the canonical
recipe it starts from; perf_recipes/_common.py L70-74 is _benchmark_common: cross_entropy_fusion_impl te and
grad_reduce_in_fp32 False, hence --loss te_fused and --grad-bytes 2; training/mixed_precision.py L231, L264, L302,
L416 are Bridge's FP8 / MXFP8 / NVFP4 presets' fp8_param_gather / fp4_param_gather True, hence --fp8-param-gather
unless the recipe turns it off). Kimi-K2's recipes train with Muon (optimizer dist_muon,
recipes/kimi/h100/kimi_k2.py L78-79), which btacalc does not model: they are planned with --optimizer sgd, the same
state (fp32 master weights and one momentum). The cases are not btacalc output: the test checks that btacalc plans
each (exit 0) and puts its busiest stage under the device's usable memory.

Recipes held back (/work/shared/reference/HELD-BACK.md), of unmodelled model families, LoRA, or that do not fit or
are refused are listed with their reason in docs/recipes42.md, not here. Qwen3-235B's GB200 PP 1 recipes keep the
account-for flags of their canonical recipe, which have no effect at PP 1 (Megatron-Core builds the same L layers):
btacalc's readers drop them with a note and its plan options refuse them (tests/test_account_for_pp1.py), so the
flags are left out of those cases.
"""

import json
from typing import NamedTuple

import pytest


class Recipe(NamedTuple):
    name: str
    model: str
    hw: str
    devices: int
    args: str
    cite: str


RECIPES = [
    Recipe('deepseek_v3_pretrain_256gpu_b200_bf16', 'deepseek-v3', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision bf16 '
           '--recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL --mtp --deepep --hybridep'
           ' --optimizer-moments bf16 --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/deepseek/b200/deepseek_v3.py L31,34,35,36,37,38,40,41,43;'
           ' perf_recipes/deepseek/common.py L35; recipes/deepseek/h100/deepseek_v3.py '
           'L100,132,134,148,149,179,188,201,221,224,229,230,246,256'),
    Recipe('deepseek_v3_pretrain_256gpu_b200_fp8cs', 'deepseek-v3', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision '
           'fp8-current --recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL --mtp --deepep --hybridep'
           ' --optimizer-moments bf16 --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce '
           '--overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/deepseek/b200/deepseek_v3.py L79,82,83,84,85,86,88,89,91;'
           ' perf_recipes/deepseek/common.py L35; recipes/deepseek/h100/deepseek_v3.py '
           'L100,132,134,148,149,179,188,201,221,224,229,230,246,256; training/mixed_precision.py L302'),
    Recipe('deepseek_v3_pretrain_256gpu_b200_fp8mx', 'deepseek-v3', 'b200', 256,
           '--tp 1 --pp 8 --vp 2 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision '
           'mxfp8 --recompute mla_up_proj,mlp --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL --mtp --cuda-graph-scope '
           'attn,moe_router,moe_preprocess --deepep --overlap-a2a --delay-wgrad-compute --optimizer-moments bf16 '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/deepseek/b200/deepseek_v3.py '
           'L127,130,131,132,133,134,136,137,139,152,154,155; perf_recipes/deepseek/common.py L35,82,83; '
           'recipes/deepseek/h100/deepseek_v3.py L100,132,134,148,149,188,201,221,224,246,256; '
           'training/mixed_precision.py L264'),
    Recipe('deepseek_v3_pretrain_256gpu_b200_fp8mx_large_scale', 'deepseek-v3', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 256 --seq 4096 --precision mxfp8 '
           '--recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL --mtp --deepep --hybridep'
           ' --optimizer-moments bf16 --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce '
           '--overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/deepseek/b200/deepseek_v3.py '
           'L217,220,221,222,223,224,226,227,229; perf_recipes/deepseek/common.py L35; '
           'recipes/deepseek/h100/deepseek_v3.py L100,132,134,148,149,179,188,201,221,224,229,230,246,256; '
           'training/mixed_precision.py L264'),
    Recipe('deepseek_v3_pretrain_256gpu_b200_nvfp4', 'deepseek-v3', 'b200', 256,
           '--tp 1 --pp 8 --vp 2 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision '
           'nvfp4 --recompute mla_up_proj,layernorm,moe_act --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tmL --mtp --deepep '
           '--overlap-a2a --delay-wgrad-compute --optimizer-moments bf16 --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/deepseek/b200/deepseek_v3.py '
           'L34,37,40,41,180,182,183,184,185,186,187,189,190; perf_recipes/deepseek/common.py L35; '
           'recipes/deepseek/h100/deepseek_v3.py L100,132,134,148,149,179,188,201,221,224,246,256'),
    Recipe('kimi_k2_pretrain_256gpu_b200_bf16', 'kimi-k2', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision bf16 '
           '--recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --grad-bytes 2 --loss '
           'te_fused --optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/b200/kimi_k2.py '
           'L29,30,33,38,39,40,41,42,44,45,47,48; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204'),
    Recipe('kimi_k2_pretrain_256gpu_b200_fp8cs', 'kimi-k2', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'fp8-current --recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --fp8-param-gather --grad-'
           'bytes 2 --loss te_fused --optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/b200/kimi_k2.py '
           'L76,77,80,85,86,87,88,89,91,92,94,95; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204; training/mixed_precision.py L302'),
    Recipe('kimi_k2_pretrain_256gpu_b200_fp8mx', 'kimi-k2', 'b200', 256,
           '--tp 1 --pp 16 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision mxfp8 '
           '--recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --grad-bytes 2 --loss '
           'te_fused --optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/b200/kimi_k2.py '
           'L123,125,126,129,134,135,136,137,138,140,141,143,144; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204'),
    Recipe('kimi_k2_pretrain_256gpu_gb200_bf16', 'kimi-k2', 'gb200', 256,
           '--tp 1 --pp 4 --vp 4 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'bf16 --recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --cuda-graph-scope '
           'moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 --loss te_fused --optimizer sgd --overlap-'
           'grad-reduce',
           'perf_recipes/_common.py L70,74; perf_recipes/kimi/gb200/kimi_k2.py '
           'L29,30,33,38,39,40,41,42,44,45,47,48,49,51,53,54; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,164,190,191,204'),
    Recipe('kimi_k2_pretrain_256gpu_gb200_fp8cs', 'kimi-k2', 'gb200', 256,
           '--tp 1 --pp 4 --vp 4 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'fp8-current --recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --cuda-graph-scope '
           'moe_router,moe_preprocess --deepep --hybridep --fp8-param-gather --grad-bytes 2 --loss te_fused '
           '--optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74; perf_recipes/kimi/gb200/kimi_k2.py '
           'L86,87,90,95,96,97,98,99,101,102,104,105,106,108,110,111; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,164,190,191,204; training/mixed_precision.py L302'),
    Recipe('kimi_k2_pretrain_256gpu_gb200_fp8mx', 'kimi-k2', 'gb200', 256,
           '--tp 1 --pp 4 --vp 4 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'mxfp8 --recompute mla_up_proj --pipeline-layout '
           'Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tL --cuda-graph-scope '
           'moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 --loss te_fused --optimizer sgd --overlap-'
           'grad-reduce',
           'perf_recipes/_common.py L70,74; perf_recipes/kimi/gb200/kimi_k2.py '
           'L143,145,146,149,154,155,156,157,158,160,161,163,164,165,167,169,170; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,164,190,191,204'),
    Recipe('kimi_k2_pretrain_1024gpu_h100_bf16', 'kimi-k2', 'h100', 1024,
           '--tp 8 --pp 16 --vp 2 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'bf16 --recompute mla_up_proj,mlp --pipeline-layout Et|(tt|)*30L --grad-bytes 2 --loss te_fused '
           '--optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/h100/kimi_k2.py '
           'L28,29,32,37,38,39,40,41,43,44,46,47; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204'),
    Recipe('kimi_k2_pretrain_1024gpu_h100_fp8cs', 'kimi-k2', 'h100', 1024,
           '--tp 8 --pp 16 --vp 2 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'fp8-current --recompute mla_up_proj,mlp --pipeline-layout Et|(tt|)*30L --fp8-param-gather --grad-bytes 2 '
           '--loss te_fused --optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/h100/kimi_k2.py '
           'L74,75,78,83,84,85,86,87,89,90,92,93; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204; training/mixed_precision.py L302'),
    Recipe('kimi_k2_pretrain_1024gpu_h100_fp8sc', 'kimi-k2', 'h100', 1024,
           '--tp 8 --pp 16 --vp 2 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'fp8-current --recompute mla_up_proj,mlp --pipeline-layout Et|(tt|)*30L --grad-bytes 2 --loss te_fused '
           '--optimizer sgd --overlap-grad-reduce',
           'perf_recipes/_common.py L70,74,84; perf_recipes/kimi/h100/kimi_k2.py '
           'L74,75,78,83,84,85,86,87,89,90,92,93,122,124; recipes/kimi/h100/kimi_k2.py '
           'L78,79,81,84,111,115,118,119,138,139,155,164,190,191,204'),
    Recipe('llama3_70b_pretrain_64gpu_b200_bf16', 'llama-3-70b', 'b200', 64,
           '--tp 2 --pp 4 --vp 5 --cp 2 --micro-batch 1 --global-batch 256 --seq 8192 --precision bf16 --recompute '
           'none --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L197,201,202,203,204,206,207,209,210; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L736,741,761,764,765,775,778,790'),
    Recipe('llama3_70b_pretrain_64gpu_b200_fp8cs', 'llama-3-70b', 'b200', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision fp8-current --recompute '
           'none --cpu-offloading-num-layers 5 --fsdp --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/b200/llama3.py '
           'L242,246,247,248,249,251,252,254,264,266; perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py '
           'L736,741,756,761,764,765,775,778; training/mixed_precision.py L302'),
    Recipe('llama3_70b_pretrain_64gpu_b200_fp8mx', 'llama-3-70b', 'b200', 64,
           '--tp 2 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision mxfp8 --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-'
           'comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/b200/llama3.py L292,296,297,298,299,301,302; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778,790; '
           'training/mixed_precision.py L264'),
    Recipe('llama3_70b_pretrain_64gpu_b200_nvfp4', 'llama-3-70b', 'b200', 64,
           '--tp 2 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision nvfp4 --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-'
           'comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/b200/llama3.py L330,334,335,336,337,339,340; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778,790; '
           'training/mixed_precision.py L416'),
    Recipe('llama3_8b_pretrain_64gpu_b200_bf16', 'llama-3-8b', 'b200', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 1024 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L35,39,40,41,42,45,47,48; '
           'perf_recipes/llama/common.py L45,56; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_64gpu_b200_fp8cs', 'llama-3-8b', 'b200', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 1024 --seq 8192 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L77,81,82,83,84,87,89,90; '
           'perf_recipes/llama/common.py L45,56; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_8gpu_b200_bf16', 'llama-3-8b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L35,39,40,41,42,44,45,47,48; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_8gpu_b200_fp8cs', 'llama-3-8b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L77,81,82,83,84,86,87,89,90; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_8gpu_b200_fp8mx', 'llama-3-8b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision mxfp8 --recompute none '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/b200/llama3.py L119,123,124,125,126,128,129,131,132; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L264'),
    Recipe('llama3_8b_pretrain_8gpu_b200_nvfp4', 'llama-3-8b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 4 --global-batch 128 --seq 8192 --precision nvfp4 --recompute none '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/b200/llama3.py L159,163,164,165,166,168,169; '
           'perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py L254,259,274,279,282,283,293,296,308; '
           'training/mixed_precision.py L416'),
    Recipe('llama31_405b_pretrain_128gpu_b200_nvfp4', 'llama-3.1-405b', 'b200', 128,
           '--tp 4 --pp 16 --vp 8 --cp 1 --micro-batch 1 --global-batch 768 --seq 8192 --precision nvfp4 --recompute '
           'none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/b200/llama31.py '
           'L163,166,169,170,171,172,174,175,177; perf_recipes/llama/common.py L56; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L416'),
    Recipe('llama31_405b_pretrain_256gpu_b200_nvfp4', 'llama-3.1-405b', 'b200', 256,
           '--tp 4 --pp 16 --vp 8 --cp 1 --micro-batch 1 --global-batch 1536 --seq 8192 --precision nvfp4 --recompute'
           ' none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama31.py '
           'L337,340,343,344,345,346,348,349,351; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L416'),
    Recipe('llama3_70b_pretrain_32gpu_gb200_bf16', 'llama-3-70b', 'gb200', 32,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 128 --seq 8192 --precision bf16 --recompute none '
           '--cpu-offloading-num-layers 20 --fsdp --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-'
           'param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L45,56; '
           'perf_recipes/llama/gb200/llama3.py L207,211,212,213,214,217,219,229,231; recipes/llama/h100/llama3.py '
           'L736,741,756,761,764,765,775,778'),
    Recipe('llama3_70b_pretrain_64gpu_gb200_bf16', 'llama-3-70b', 'gb200', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision bf16 --recompute none '
           '--cpu-offloading-num-layers 20 --fsdp --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-'
           'param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L207,211,212,213,214,216,217,219,229,231; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778'),
    Recipe('llama3_70b_pretrain_64gpu_gb200_fp8cs', 'llama-3-70b', 'gb200', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 256 --seq 8192 --precision fp8-current --recompute '
           'none --cpu-offloading-num-layers 40 --fsdp --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L260,264,265,266,267,269,270,272,282,284; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_70b_pretrain_64gpu_gb200_fp8mx', 'llama-3-70b', 'gb200', 64,
           '--tp 2 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision mxfp8 --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-'
           'comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L313,317,318,319,320,322,323; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778,790; '
           'training/mixed_precision.py L264'),
    Recipe('llama3_70b_pretrain_64gpu_gb200_nvfp4', 'llama-3-70b', 'gb200', 64,
           '--tp 2 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision nvfp4 --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-'
           'comm-overlap',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L351,355,356,357,358,360,361,363; recipes/llama/h100/llama3.py L736,741,757,761,764,765,775,778,790; '
           'training/mixed_precision.py L416'),
    Recipe('llama3_70b_sft_32gpu_gb200_bf16', 'llama-3-70b', 'gb200', 32,
           '--tp 1 --pp 8 --vp 10 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision bf16 --recompute '
           'none --cuda-graph-scope mlp --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L492,502,503,504,505,507,508,510,511; recipes/llama/h100/llama3.py L1790,1795,1816,1819,1836,1840,1841'),
    Recipe('llama3_70b_sft_32gpu_gb200_fp8cs', 'llama-3-70b', 'gb200', 32,
           '--tp 1 --pp 8 --vp 10 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision fp8-current '
           '--recompute none --cuda-graph-scope mlp --fp8-param-gather --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L545,555,556,557,558,560,561,563,564; recipes/llama/h100/llama3.py L1790,1795,1816,1819,1836,1840,1841; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_70b_sft_32gpu_gb200_fp8mx', 'llama-3-70b', 'gb200', 32,
           '--tp 1 --pp 8 --vp 10 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision mxfp8 --recompute '
           'none --cuda-graph-scope mlp --fp8-param-gather --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L555,556,557,558,560,561,563,564,774; recipes/llama/h100/llama3.py L1790,1795,1816,1819,1836,1840,1841; '
           'training/mixed_precision.py L264'),
    Recipe('llama3_8b_pretrain_32gpu_gb200_bf16', 'llama-3-8b', 'gb200', 32,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 512 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L45,56; perf_recipes/llama/gb200/llama3.py '
           'L38,42,43,44,45,48,50,51; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_32gpu_gb200_fp8cs', 'llama-3-8b', 'gb200', 32,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 512 --seq 8192 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L45,56; perf_recipes/llama/gb200/llama3.py '
           'L80,84,85,86,87,90,92,93; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_8gpu_gb200_bf16', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L38,42,43,44,45,47,48,50,51; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_8gpu_gb200_fp8cs', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L80,84,85,86,87,89,90,92,93; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_8gpu_gb200_fp8mx', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 2 --global-batch 128 --seq 8192 --precision mxfp8 --recompute none '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L122,126,127,128,129,131,132,134,135; recipes/llama/h100/llama3.py L254,259,279,282,283,293,296,308; '
           'training/mixed_precision.py L264'),
    Recipe('llama3_8b_sft_8gpu_gb200_bf16', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 8 --seq 16384 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L396,405,408,409,410,411,413,414,416; recipes/llama/h100/llama3.py L1576,1602,1605,1622,1626,1627'),
    Recipe('llama3_8b_sft_8gpu_gb200_fp8cs', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 8 --seq 16384 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L444,453,456,457,458,459,461,462,464; recipes/llama/h100/llama3.py L1576,1602,1605,1622,1626,1627; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_sft_8gpu_gb200_fp8mx', 'llama-3-8b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 8 --seq 16384 --precision mxfp8 --recompute none '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama3.py '
           'L453,456,457,458,459,461,462,464,749; recipes/llama/h100/llama3.py L1576,1602,1605,1622,1626,1627; '
           'training/mixed_precision.py L264'),
    Recipe('llama31_405b_pretrain_128gpu_gb200_nvfp4', 'llama-3.1-405b', 'gb200', 128,
           '--tp 4 --pp 16 --vp 8 --cp 1 --micro-batch 1 --global-batch 768 --seq 8192 --precision nvfp4 --recompute '
           'none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama31.py '
           'L160,163,166,167,168,169,171,172,174; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L416'),
    Recipe('llama31_405b_pretrain_256gpu_gb200_fp8cs', 'llama-3.1-405b', 'gb200', 256,
           '--tp 4 --pp 16 --vp 4 --cp 1 --micro-batch 1 --global-batch 1536 --seq 8192 --precision fp8-current '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-'
           'overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama31.py '
           'L252,255,258,259,260,261,264,265; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1243,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L302'),
    Recipe('llama31_405b_pretrain_256gpu_gb200_fp8mx', 'llama-3.1-405b', 'gb200', 256,
           '--tp 4 --pp 16 --vp 8 --cp 1 --micro-batch 1 --global-batch 1536 --seq 8192 --precision mxfp8 --recompute'
           ' none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama31.py '
           'L297,300,303,304,305,306,308,309; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1243,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L264'),
    Recipe('llama31_405b_pretrain_256gpu_gb200_nvfp4', 'llama-3.1-405b', 'gb200', 256,
           '--tp 4 --pp 16 --vp 8 --cp 1 --micro-batch 1 --global-batch 1536 --seq 8192 --precision nvfp4 --recompute'
           ' none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/gb200/llama31.py '
           'L337,340,343,344,345,346,348,349,351; recipes/llama/h100/llama3.py '
           'L1219,1227,1228,1248,1251,1252,1262,1265,1277; training/mixed_precision.py L416'),
    Recipe('llama3_70b_pretrain_64gpu_h100_bf16', 'llama-3-70b', 'h100', 64,
           '--tp 4 --pp 4 --vp 5 --cp 2 --micro-batch 1 --global-batch 256 --seq 8192 --precision bf16 --recompute '
           'none --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L121,125,126,127,128,130,131; recipes/llama/h100/llama3.py L736,741,756,761,764,765,775,778,790'),
    Recipe('llama3_70b_pretrain_64gpu_h100_fp8cs', 'llama-3-70b', 'h100', 64,
           '--tp 4 --pp 8 --vp 5 --cp 1 --micro-batch 1 --global-batch 256 --seq 8192 --precision fp8-current '
           '--recompute none --pipeline-layout Et*2|(t*2|)*34,t*3|(t*2|)*3,tL --fp8-param-gather --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L162,166,167,168,169,170,172,173; recipes/llama/h100/llama3.py L741,756,761,764,765,775,778,790; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_70b_sft_32gpu_h100_bf16', 'llama-3-70b', 'h100', 32,
           '--tp 4 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision bf16 --recompute '
           'none --grad-bytes 2 --loss te_fused --tp-comm-overlap',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L293,303,304,305,306,308,309; recipes/llama/h100/llama3.py L1790,1795,1816,1819,1830,1836,1840,1841'),
    Recipe('llama3_70b_sft_32gpu_h100_fp8cs', 'llama-3-70b', 'h100', 32,
           '--tp 4 --pp 4 --vp 5 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision fp8-current '
           '--recompute none --cuda-graph-scope mlp --fp8-param-gather --grad-bytes 2 --loss te_fused --tp-comm-'
           'overlap',
           'perf_recipes/_common.py L70,74; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L346,355,356,357,358,360,361,363,364; recipes/llama/h100/llama3.py L1790,1795,1816,1819,1836,1840,1841; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_64gpu_h100_bf16', 'llama-3-8b', 'h100', 64,
           '--tp 1 --pp 1 --cp 2 --micro-batch 1 --global-batch 1024 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L45,56; perf_recipes/llama/h100/llama3.py'
           ' L37,41,42,43,44,47; recipes/llama/h100/llama3.py L254,259,274,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_64gpu_h100_fp8cs', 'llama-3-8b', 'h100', 64,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 1024 --seq 8192 --precision fp8-current --recompute '
           'full --recompute-layers 5 --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce '
           '--overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L45,56; perf_recipes/llama/h100/llama3.py'
           ' L75,79,80,81,82,85,87,89; recipes/llama/h100/llama3.py L254,259,274,279,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_pretrain_8gpu_h100_bf16', 'llama-3-8b', 'h100', 8,
           '--tp 1 --pp 1 --cp 2 --micro-batch 1 --global-batch 128 --seq 8192 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L37,41,42,43,44,46,47; recipes/llama/h100/llama3.py L254,259,274,279,282,283,293,296,308'),
    Recipe('llama3_8b_pretrain_8gpu_h100_fp8cs', 'llama-3-8b', 'h100', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 128 --seq 8192 --precision fp8-current --recompute '
           'full --recompute-layers 5 --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce '
           '--overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L75,79,80,81,82,84,85,87,89; recipes/llama/h100/llama3.py L254,259,274,279,283,293,296,308; '
           'training/mixed_precision.py L302'),
    Recipe('llama3_8b_sft_8gpu_h100_bf16', 'llama-3-8b', 'h100', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision bf16 --recompute none '
           '--grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L204,213,214,215,216,217,219,220; recipes/llama/h100/llama3.py L1576,1602,1605,1616,1622,1626,1627'),
    Recipe('llama3_8b_sft_8gpu_h100_fp8cs', 'llama-3-8b', 'h100', 8,
           '--tp 1 --pp 1 --cp 1 --micro-batch 1 --global-batch 32 --seq 4096 --precision fp8-current --recompute '
           'none --fp8-param-gather --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/llama/common.py L56; perf_recipes/llama/h100/llama3.py '
           'L247,256,257,258,259,260,262,263,265; recipes/llama/h100/llama3.py L1576,1602,1605,1622,1626,1627; '
           'training/mixed_precision.py L302'),
    Recipe('qwen3_235b_a22b_pretrain_128gpu_b200_fp8mx_deepep_dev', 'qwen3-235b-a22b', 'b200', 128,
           '--tp 2 --pp 4 --vp 2 --cp 1 --ep 16 --etp 1 --micro-batch 3 --global-batch 3072 --seq 4096 --precision '
           'mxfp8 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--deepep --overlap-a2a --delay-wgrad-compute --optimizer-moments bf16 --fp8-param-gather --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L710,713,715,721,726,727,728,729,730,731,733,739,744,745,748,749; recipes/qwen/h100/qwen3_moe.py '
           'L250,257,261,262,279,288,294,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_b200_bf16', 'qwen3-235b-a22b', 'b200', 256,
           '--tp 1 --pp 8 --vp 4 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'bf16 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L359,361,363,365,369,370,371,372,373,375,376,378,379; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_b200_fp8cs', 'qwen3-235b-a22b', 'b200', 256,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'fp8-current --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-'
           'split --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L407,409,411,413,417,418,419,420,421,423,424,426,427; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L302'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx', 'qwen3-235b-a22b', 'b200', 256,
           '--tp 1 --pp 8 --vp 3 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'mxfp8 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--deepep --hybridep --overlap-a2a --delay-wgrad-compute --fp8-param-gather --fp8-attention --grad-bytes 2'
           ' --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L454,456,458,460,464,465,466,467,468,470,471,473,474; perf_recipes/qwen/common.py L37,38,55,56; '
           'recipes/qwen/h100/qwen3_moe.py L250,255,261,262,288,294,308,311,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx_large_scale', 'qwen3-235b-a22b', 'b200', 256,
           '--tp 1 --pp 8 --vp 3 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 512 --seq 4096 --precision '
           'mxfp8 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--deepep --hybridep --overlap-a2a --delay-wgrad-compute --fp8-param-gather --fp8-attention --grad-bytes 2'
           ' --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L454,456,458,460,464,465,466,467,468,471,473,474,509; perf_recipes/qwen/common.py L37,38,55,56; '
           'recipes/qwen/h100/qwen3_moe.py L250,255,261,262,288,294,308,311,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_b200_nvfp4', 'qwen3-235b-a22b', 'b200', 256,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision nvfp4 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L409,411,413,417,418,419,420,421,423,424,426,427,563; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L416'),
    Recipe('qwen3_235b_a22b_pretrain_64gpu_b200_bf16', 'qwen3-235b-a22b', 'b200', 64,
           '--tp 1 --pp 8 --vp 4 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'bf16 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L38,40,42,44,48,49,50,51,52,54,55,57,58; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331'),
    Recipe('qwen3_235b_a22b_pretrain_64gpu_b200_fp8cs', 'qwen3-235b-a22b', 'b200', 64,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'fp8-current --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-'
           'split --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L86,88,90,92,96,97,98,99,100,102,103,105,106; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L302'),
    Recipe('qwen3_235b_a22b_pretrain_64gpu_b200_fp8mx', 'qwen3-235b-a22b', 'b200', 64,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision mxfp8 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L133,135,137,139,143,144,145,146,147,149,150,152,153; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_64gpu_b200_nvfp4', 'qwen3-235b-a22b', 'b200', 64,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision nvfp4 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/b200/qwen3_moe.py '
           'L88,90,92,96,97,98,99,100,102,103,105,106,538; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L416'),
    Recipe('qwen3_30b_a3b_pretrain_64gpu_b200_bf16', 'qwen3-30b-a3b', 'b200', 64,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 4096 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L180,182,184,186,190,191,192,193,194,197,199,200,202,203; perf_recipes/qwen/common.py L32; '
           'recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_64gpu_b200_fp8cs', 'qwen3-30b-a3b', 'b200', 64,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 4096 --seq 4096 --precision '
           'fp8-current --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L234,236,238,240,244,245,246,247,248,251,253,254,256,257; perf_recipes/qwen/common.py L32; '
           'recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_b200_bf16', 'qwen3-30b-a3b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L180,182,184,186,190,191,192,193,194,196,197,199,200,202,203; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_b200_fp8cs', 'qwen3-30b-a3b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision fp8-current'
           ' --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-'
           'gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L234,236,238,240,244,245,246,247,248,250,251,253,254,256,257; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx', 'qwen3-30b-a3b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision mxfp8 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --overlap-a2a '
           '--delay-wgrad-compute --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-'
           'param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L288,290,292,294,298,299,300,301,302,304,305,307,308,314,315,321; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132; training/mixed_precision.py L264'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_b200_nvfp4', 'qwen3-30b-a3b', 'b200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision nvfp4 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-gather'
           ' --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/b200/qwen3_moe.py '
           'L236,238,240,244,245,246,247,248,250,251,253,254,256,257,592; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132; training/mixed_precision.py L416'),
    Recipe('qwen3_235b_a22b_pretrain_128gpu_gb200_fp8mx_paged_stash_dev', 'qwen3-235b-a22b', 'gb200', 128,
           '--tp 1 --pp 1 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision mxfp8 '
           '--recompute none --deepep --hybridep --overlap-a2a --delay-wgrad-compute --optimizer-moments bf16 '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L932,935,937,943,948,949,950,951,952,954,964,965,970,975,976,982,983; recipes/qwen/h100/qwen3_moe.py '
           'L250,252,257,261,262,288,294,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_128gpu_gb200_fp8mx_partial_cg_dev', 'qwen3-235b-a22b', 'gb200', 128,
           '--tp 1 --pp 1 --cp 1 --ep 64 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision mxfp8 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --overlap-a2a '
           '--delay-wgrad-compute --optimizer-moments bf16 --fp8-param-gather --grad-bytes 2 --loss te_fused '
           '--overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L1013,1016,1018,1024,1029,1030,1031,1032,1033,1035,1038,1039,1043,1048,1049,1054,1055; '
           'recipes/qwen/h100/qwen3_moe.py L250,252,257,261,262,288,294,331; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_gb200_bf16', 'qwen3-235b-a22b', 'gb200', 256,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision bf16 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --cuda-'
           'graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L357,359,361,363,367,368,369,370,371,373,374,376,377,379,380; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,288,294,308,311,331'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs', 'qwen3-235b-a22b', 'gb200', 256,
           '--tp 1 --pp 8 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'fp8-current --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-'
           'split --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-gather --grad-'
           'bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L411,413,415,417,421,422,423,424,425,427,428,430,431,433,434; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,288,294,308,311,331; training/mixed_precision.py L302'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_gb200_nvfp4', 'qwen3-235b-a22b', 'gb200', 256,
           '--tp 1 --pp 8 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision nvfp4 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --cuda-'
           'graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-gather --grad-bytes 2 --loss '
           'te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L413,415,417,421,422,423,424,425,427,428,430,431,433,434,576; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,288,294,308,311,331; training/mixed_precision.py L416'),
    Recipe('qwen3_235b_a22b_pretrain_64gpu_gb200_bf16', 'qwen3-235b-a22b', 'gb200', 64,
           '--tp 1 --pp 8 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision bf16 '
           '--recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --cuda-'
           'graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L37,39,41,43,47,48,49,50,51,53,54,56,57,59,60; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,288,294,308,311,331'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_dev', 'qwen3-30b-a3b', 'gb200', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision bf16 '
           '--recompute none --deepep --hybridep --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L742,745,747,753,758,759,760,761,762,764,766,767; recipes/qwen/h100/qwen3_moe.py '
           'L55,57,62,79,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_gb200_fp8mx_paged_stash_dev', 'qwen3-30b-a3b', 'gb200', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision mxfp8 '
           '--recompute none --deepep --hybridep --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L860,861,865,867,873,878,879,880,881,882,884,885,886,897,898; recipes/qwen/h100/qwen3_moe.py '
           'L55,57,62,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_gb200_fp8mx_partial_cg_dev', 'qwen3-30b-a3b', 'gb200', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision mxfp8 '
           '--recompute none --deepep --hybridep --grad-bytes 2 --loss te_fused',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L798,799,803,805,811,816,817,818,819,820,822,824,827,828; recipes/qwen/h100/qwen3_moe.py '
           'L55,57,62,79,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_32gpu_gb200_bf16', 'qwen3-30b-a3b', 'gb200', 32,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 2048 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/common.py L32; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L197,199,201,203,207,208,209,210,211,214,216,217,219,220; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_32gpu_gb200_fp8cs', 'qwen3-30b-a3b', 'gb200', 32,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 2048 --seq 4096 --precision '
           'fp8-current --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/common.py L32; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L251,253,255,257,261,262,263,264,265,268,270,271,273,274; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_gb200_bf16', 'qwen3-30b-a3b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --grad-bytes 2 '
           '--loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L197,199,201,203,207,208,209,210,211,213,214,216,217,219,220; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_gb200_fp8cs', 'qwen3-30b-a3b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision fp8-current'
           ' --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-'
           'gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/gb200/qwen3_moe.py '
           'L251,253,255,257,261,262,263,264,265,267,268,270,271,273,274; recipes/qwen/h100/qwen3_moe.py '
           'L55,60,88,95,109,112,132; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx', 'qwen3-30b-a3b', 'gb200', 8,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 4 --global-batch 512 --seq 4096 --precision mxfp8 '
           '--recompute none --deepep --hybridep --overlap-a2a --delay-wgrad-compute --fp8-param-gather '
           '--fp8-attention --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/common.py L37,38,55,56; '
           'perf_recipes/qwen/gb200/qwen3_moe.py L305,307,309,311,315,316,317,318,319,321,322,324,325; '
           'recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132; training/mixed_precision.py L264'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_h100_bf16', 'qwen3-235b-a22b', 'h100', 256,
           '--tp 2 --pp 8 --vp 4 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'bf16 --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split '
           '--overlap-a2a --delay-wgrad-compute --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-'
           'gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/h100/qwen3_moe.py '
           'L139,141,143,145,149,150,151,152,153,155,156,158,159,163; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_h100_bf16_hybridep_dev', 'qwen3-235b-a22b', 'h100', 256,
           '--tp 2 --pp 8 --vp 3 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 2048 --seq 4096 --precision '
           'bf16 --recompute moe_act,layernorm --account-for-embedding-in-pipeline-split --account-for-loss-in-'
           'pipeline-split --cuda-graph-scope moe_router,moe_preprocess --deepep --hybridep --overlap-a2a --delay-'
           'wgrad-compute --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/h100/qwen3_moe.py '
           'L497,502,508,513,514,515,516,517,518,520,521,522,523,524,527,532,533; recipes/qwen/h100/qwen3_moe.py '
           'L250,257,261,262,288,308,311,331'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs', 'qwen3-235b-a22b', 'h100', 256,
           '--tp 2 --pp 8 --vp 4 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 8192 --seq 4096 --precision '
           'fp8-current --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-'
           'split --overlap-a2a --delay-wgrad-compute --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/h100/qwen3_moe.py '
           'L192,194,196,198,202,203,204,205,206,208,209,211,212,216; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L302'),
    Recipe('qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_large_scale', 'qwen3-235b-a22b', 'h100', 256,
           '--tp 2 --pp 8 --vp 4 --cp 1 --ep 32 --etp 1 --micro-batch 1 --global-batch 512 --seq 4096 --precision '
           'fp8-current --recompute none --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-'
           'split --overlap-a2a --delay-wgrad-compute --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-'
           'grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/h100/qwen3_moe.py '
           'L192,194,196,198,202,203,204,205,206,209,211,212,216,245; recipes/qwen/h100/qwen3_moe.py '
           'L250,255,261,262,279,288,294,308,311,331; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_h100_bf16', 'qwen3-30b-a3b', 'h100', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 1024 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope moe_router,moe_preprocess --deepep --hybridep --overlap-a2a '
           '--precision-aware-optimizer --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/h100/qwen3_moe.py L38,41,42; '
           'recipes/qwen/h100/qwen3_moe.py '
           'L55,88,95,132,157,163,165,167,169,170,171,172,173,174,177,178,192,213,214,220'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs', 'qwen3-30b-a3b', 'h100', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 1024 --seq 4096 --precision '
           'fp8-current --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/h100/qwen3_moe.py '
           'L71,73,75,77,81,82,83,84,85,87,88,90,91,94,95; recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132; '
           'training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_16gpu_h100_fp8ds', 'qwen3-30b-a3b', 'h100', 16,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 1024 --seq 4096 --precision fp8 '
           '--recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --fp8-param-gather'
           ' --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/h100/qwen3_moe.py '
           'L73,75,77,81,82,83,84,85,87,88,90,91,94,95,132; recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132; '
           'training/mixed_precision.py L231'),
    Recipe('qwen3_30b_a3b_pretrain_32gpu_h100_bf16_dev', 'qwen3-30b-a3b', 'h100', 32,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 256 --seq 4096 --precision bf16 '
           '--recompute none --deepep --hybridep --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-'
           'param-gather',
           'perf_recipes/_common.py L70,74,84; perf_recipes/qwen/h100/qwen3_moe.py '
           'L384,387,389,395,400,401,402,403,404,406,408,409; recipes/qwen/h100/qwen3_moe.py '
           'L55,57,62,79,88,95,109,112,132'),
    Recipe('qwen3_30b_a3b_pretrain_32gpu_h100_fp8sc_dev', 'qwen3-30b-a3b', 'h100', 32,
           '--tp 1 --pp 1 --cp 1 --ep 8 --etp 1 --micro-batch 1 --global-batch 256 --seq 4096 --precision fp8-current'
           ' --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep --optimizer-'
           'moments bf16 --fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-'
           'gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/h100/qwen3_moe.py '
           'L436,440,442,448,453,454,455,456,457,459,460,461,464,465,468,469; recipes/qwen/h100/qwen3_moe.py '
           'L55,57,62,88,95,132; training/mixed_precision.py L302'),
    Recipe('qwen3_30b_a3b_pretrain_64gpu_h100_bf16', 'qwen3-30b-a3b', 'h100', 64,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision bf16 '
           '--recompute none --cuda-graph-scope moe_router,moe_preprocess --deepep --hybridep --overlap-a2a '
           '--precision-aware-optimizer --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/common.py L32; perf_recipes/qwen/h100/qwen3_moe.py '
           'L38,41,42; recipes/qwen/h100/qwen3_moe.py '
           'L55,88,95,132,157,163,165,167,169,170,171,172,173,174,178,192,213,214,220'),
    Recipe('qwen3_30b_a3b_pretrain_64gpu_h100_fp8cs', 'qwen3-30b-a3b', 'h100', 64,
           '--tp 1 --pp 1 --cp 1 --ep 16 --etp 1 --micro-batch 1 --global-batch 4096 --seq 4096 --precision '
           'fp8-current --recompute none --cuda-graph-scope attn,moe_router,moe_preprocess --deepep --hybridep '
           '--fp8-param-gather --grad-bytes 2 --loss te_fused --overlap-grad-reduce --overlap-param-gather',
           'perf_recipes/_common.py L70,74; perf_recipes/qwen/common.py L32; perf_recipes/qwen/h100/qwen3_moe.py '
           'L71,73,75,77,81,82,83,84,85,88,90,91,94,95; recipes/qwen/h100/qwen3_moe.py L55,60,88,95,109,112,132; '
           'training/mixed_precision.py L302'),
]


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_recipe_plans_and_fits(cli, recipe):
    code, out, err = cli("plan", "--model", recipe.model, "--hw", recipe.hw, "--devices", str(recipe.devices),
                         *recipe.args.split(), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["plan"]["fits"]
    assert plan["memory_bytes"]["total"] <= plan["memory_bytes"]["usable_capacity"]
    assert plan["throughput"]["tokens_per_s"] > 0


# Megatron-Core @ d98e8a64 transformer_config.py L2275-2285: a layout of C model chunks over PP stages detects
# VP = C / PP and asserts only that a given virtual_pipeline_model_parallel_size equal it; Megatron-LM's
# arguments.py L928 (one of the three VP forms) is the launcher's check, which Megatron-Bridge does not run. Bridge's
# Kimi-K2 GB200 recipes set VP 4 beside a 16-chunk layout over PP 4 (perf_recipes/kimi/gb200/kimi_k2.py). Here
# Qwen3-30B-A3B's 48 layers as 4 chunks of 12 over PP 2: VP = 4 / 2 = 2.
LAYOUT_4_CHUNKS = "Et*12|t*12|t*12|t*12L"


def _bridge_file(tmp_path, vp):
    lines = ["mixed_precision=bf16_mixed", "model.pipeline_model_parallel_size=2",
             f'model.pipeline_model_parallel_layout="{LAYOUT_4_CHUNKS}"', "model.expert_model_parallel_size=8",
             "ddp.use_distributed_optimizer=True", "train.micro_batch_size=1", "train.global_batch_size=64"]
    if vp is not None:
        lines.append(f"model.virtual_pipeline_model_parallel_size={vp}")
    path = tmp_path / f"vp{vp}.overrides"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _bridge_plan(cli, path):
    return cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--from-bridge", path, "--json")


def test_bridge_vp_beside_a_layout_that_agrees_is_planned(cli, tmp_path):
    chunks, pp = LAYOUT_4_CHUNKS.count("|") + 1, 2
    code, out, err = _bridge_plan(cli, _bridge_file(tmp_path, chunks // pp))
    assert code in (0, 1) and out, err  # planned (this small file need not fit), not refused
    code0, out0, _ = _bridge_plan(cli, _bridge_file(tmp_path, None))
    assert code0 == code
    plan, plan0 = json.loads(out), json.loads(out0)
    assert plan["memory_bytes"] == plan0["memory_bytes"] and plan["memory_stages"] == plan0["memory_stages"]


def test_bridge_vp_beside_a_layout_that_disagrees_is_refused(cli, tmp_path):
    code, out, err = _bridge_plan(cli, _bridge_file(tmp_path, 1 + 2))
    assert code == 2 and out == "" and err.count("\n") == 1 and "4 model chunks" in err, err
