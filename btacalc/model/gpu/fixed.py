"""Costs a GPU pays once per optimizer step, whatever the batch: the optimizer update and the gradient
norm; and per micro-batch the CPU's kernel launches when the kernels are too short to hide them, and the
main-gradient add when the weight-gradient GEMMs do not accumulate themselves.

**Optimizer update** (bandwidth-bound: a few FLOPs per byte). Megatron's distributed optimizer
(megatron/core/optimizer/distrib_optimizer.py; --use-distributed-optimizer, `zero_stage >= 1` here)
keeps, per parameter of the rank's shard, the fp32 main (master) weight and Adam's two fp32 moments
(the catalogue's `optimizer` state, 12 B) and reads the main gradient (`gradients`: 4 B in fp32, 2 with
--grad-bytes 2). Adam (Kingma & Ba 2015, Alg. 1; apex/TE FusedAdam, one pass) reads the gradient and the
three fp32 tensors and writes the three back, then the updated weight is copied into the 16-bit model
weight (`weights`, 2 B):

    bytes per local parameter = gradients + 2 x optimizer + weights = 4 + 24 + 2 = 30 B
                                (reads 16 B: gradient, master, m, v; writes 14 B: master, m, v, 16-bit weight)

With the precision-aware optimizer's int16 remainders (`optimizer` 10 B: RunOptions.param_remainders) FusedAdam's
kernel rebuilds each fp32 master weight from the bf16 parameter and its remainder, so it reads the 16-bit weight too
(TransformerEngine @ d0067d0 transformer_engine/common/multi_tensor/adam.cu AdamFunctorMasterParamRemainder L179-290:
`local_p[ii] = p[i]` beside `p_remainder[i]`, both written back): 4 + 20 + 2 x 2 = 28 B (review28).
    t_optimizer = local parameters x 30 B / (HBM bandwidth x f_stream)  (f_stream: memory.achievable_bandwidth_fraction)

Local parameters: the stage's per-device parameters (after TP, PP, EP, ETP), divided by the ZeRO shard
group when the optimizer state is sharded (DP·CP for the dense part, EDP for the experts), else whole.

**Gradient norm and clipping** (Megatron clip_grad_norm_fp32, megatron/core/optimizer/clip_grads.py):
one read of the local main gradients (the same shard) for the squared norm, then an all-reduce of one
fp32 scalar over every rank (through the ring helper of `collectives.py`, which carries whatever
per-call latency it models); the scaling by the clip coefficient is applied only when the norm exceeds
the threshold, and is not counted:

    t_grad_norm = local parameters x gradients B / (HBM bandwidth x f_stream) + all-reduce(4 B over all ranks)

**Kernel launches (host issue time).** The CPU issues kernels one after another, a few microseconds each
(the profile's `kernels.launch_overhead_s`, an estimate: the CUDA C++ Best Practices Guide discusses kernel
launch overhead; CUDA graphs remove most of it); the GPU queue hides them while the kernels run longer. A
stage's micro-batch therefore takes at least its host issue time, and what exceeds its GPU time shows:

    t_host   = kernels x launch_overhead_s + expert GEMMs x expert_gemm_host_s + module calls x module_host_s
               + glue ops x eager_op_host_s      (glue ops: with the grouped linears' per-expert Python)
    t_launch = max(0, t_host - GPU time of the micro-batch)   (a stage with MoE layers: split by pass, below)

Kernels per phase (an estimate, not a trace): a dense matmul phase launches each GEMM once forward and
twice backward (data and weight gradient), other phases one kernel forward and one backward, the
FlashAttention core one each; eager attention's Q K^T (torch.baddbmm with alpha = softmax_scale) once forward and
four times backward (two bmm, two scalings) and its P V (torch.bmm) once and twice (model/gpu/costs.py
`_eager_core_kernels`); a re-run repeats the forward.

**Grouped expert GEMMs are a loop on the host.** TransformerEngine's GroupedLinear (Megatron's
`--moe-grouped-gemm` with the TE backend) runs a grouped GEMM as one cuBLASLt GEMM per local expert,
spread over 4 compute streams (TransformerEngine @ d0067d0d transformer_engine/common/gemm/
cublaslt_gemm.cu L970-1023, multi_stream_cublas_gemm: one GEMM call per expert, each on compute stream
i mod streams; TE issue 1386: the multi-stream loop is kept over cuBLAS/CUTLASS grouped kernels). Each
expert GEMM pays the host path of one cuBLASLt call (descriptors, the algorithm heuristic queried on every
call at L766, the launch, stream events), far more than a bare launch. Its cost is taken from TransformerEngine PR 3134's SM100 benchmark
(benchmarks/linear/benchmark_grouped_linear.py, "pure" rows: operands prepared, GEMMs only): 8 experts x
128 tokens, N = K = 2,048 take 0.267 ms through the multi-stream path and 0.069 ms as one CUTLASS
launch, so the loop, not the math, sets the time:

    expert_gemm_host_s = 0.267 ms / 8 experts = 33.4 us        (the profile's `kernels.expert_gemm_host_s`)

A grouped GEMM over G local experts (E/EP) then costs G x 33.4 us of host time per pass: forward once,
backward twice (data and weight gradient), a re-run once more. Qwen3-30B-A3B at EP 8 (16 local experts,
two grouped GEMMs per layer): 16 x 2 x 3 = 96 expert GEMMs, 3.2 ms of host time per layer and micro-batch,
more than its 2.7 ms of GPU work on a B200 at 4,096 tokens: the step is host-bound (Megatron's MoE README,
"CPU Overhead Bottleneck": gaps between kernels; the fixes it lists are CUDA graphs and a larger
micro-batch). A profile without `expert_gemm_host_s` counts each expert GEMM as one plain launch.

**Low precision quantises a grouped operand per expert.** TransformerEngine v2.6-v2.13 (the NeMo 25.x-26.0x
containers) quantise a GroupedLinear's input forward and its output gradient backward with one `tex.split_quantize`
call each (TE @ v2.9 70f53666 transformer_engine/pytorch/module/grouped_linear.py L126-127, L314-327), which runs
each local expert's quantizer in a C++ loop unless the recipe has a fused multi-tensor kernel (csrc/extensions/
cast.cpp L103-150: only delayed-scaling FP8 does). Per expert the quantizer launches k kernels (quantizer.cpp:
MXFP8 and FP8 block scaling 1, FP8 current scaling 3: amax, scale, cast; NVFP4 grouped from TE v2.11: 0), each
taken at launch_overhead_s (no Python runs per expert; no published per-call host time was found):

    quantise kernels per grouped GEMM = G x k x (2 + re-runs)       (k: precision.toml grouped_quantize_kernels_per_expert)
    Qwen3-30B-A3B MXFP8 at EP 8: 16 x 2 grouped linears x 2 passes x 1 = 64 launches, 0.26 ms per layer and micro-batch

**Layer modules are Python on the host.** Each linear module of Megatron's TransformerEngine layer spec
(Megatron-LM @ d98e8a64 megatron/core/models/gpt/gpt_layer_specs.py L139-159: linear_qkv, linear_proj;
experts.py L183-240: the grouped linear_fc1 and linear_fc2; the dense MLP's fc1 and fc2) and its attention
module (core_attention, TEDotProductAttention) spends CPU time in Python per call beyond its kernels' launches
(argument checks, quantizer and workspace set-up, autograd bookkeeping). TransformerEngine PR 1191
(2024-09-18) measured Megatron-core's TEColumnParallelLinear at 140 us per forward pass (BF16, TP 1) and
115 us after it; that forward launches one GEMM, already counted at launch_overhead_s:

    module_host_s = 115 us - 4 us = 111 us                       (the profile's `kernels.module_host_s`)

A module is called once forward, once backward (autograd runs its backward function once for the data and
weight gradients; taken at the forward's cost, an estimate) and once per re-run. The catalogue marks which
GEMMs a module issues (`Gemm.module`; the router's gating GEMM is a functional call inside the router,
router.py L111). Qwen3-30B-A3B: 4 linear modules x 2 passes + the attention module forward and backward =
10 calls, 1.11 ms per layer and micro-batch. Norm modules (q/k norms, the MoE layer's pre-MLP norm) are not
counted: no published per-call time. Later TransformerEngine releases cut the per-call time further (TE
issue 2126, 2026-01-03: a BF16 te.Linear costs about what torch.nn.Linear does, 13.48 us per forward on an
x86 host in TE issue 2053), so for 2026 containers 111 us is an upper bound of the module's own share.

**The layer's eager glue is Python on the host too.** Between its modules a Megatron layer runs its own
Python and eager PyTorch operators: TransformerLayer, attention and MoE layer logic, the q/k/v split and the rotary
embedding, the residual adds, the dispatcher's permutation and bookkeeping. A published per-operator cost times
the operators counted does not cover it: the aten calls are countable (tools/moe_host_ops.py on Megatron-LM @
554ce493: the router and all-to-all dispatcher issue 61 forward, 431 backward per layer at 128 experts), but
timing the same code shows the Python between them costs more than they do (a local-spec layer's forward: 346 aten
calls, the time of 1,200-1,430 reference operators in two runs). So the glue is measured whole, on a CPU, in units of one
reference eager operator timed in the same process (tools/moe_host_ops.py --wall: a Megatron local-spec layer with
tiny tensors, its modules, norms and experts replaced by one-op stand-ins because they are counted above; CPU time
of the thread), and turned into time with that operator's published cost on an H100 host:

    eager_op_host_s = 3.8 us   (PyTorch issue 122029, tfiala 2024-03-29: benchmarks/dynamo/microbenchmarks/
                                overheads.py, `x + 1` eager with requires_grad on a 1x H100 machine)
    glue of a dense (GQA, SwiGLU) layer          = 161 forward + 155 backward reference ops  (catalogue: qkv_proj)
    glue an MoE layer adds, router CUDA-graphed  = 195 forward + 140 backward reference ops  (catalogue: dispatch)

(the numbers, their spread over repeated timings and what they leave out are in docs/host-time.md). Qwen3-30B-A3B:
651 x 3.8 us = 2.47 ms per layer and micro-batch; the forward share repeats with a re-run. The router's own glue
is not counted: the measured recipes capture it in a CUDA graph (`cuda_graph_scope` moe_router, moe_preprocess);
MLA layers (no qkv_proj phase) carry only the MoE extra: their attention's glue is not measured.

**A grouped linear runs Python per local expert.** Beyond its GEMM loop (`expert_gemm_host_s`, C++) and its call
(`module_host_s`, one per pass), TransformerEngine's GroupedLinear loops in Python over its local experts: the
weights' getattr and casts, the saving and restoring of 4 tensors per expert, the main-gradient closures, and in
the backward the Megatron-DDP dummy-gradient handler, AccumulateGrad and Megatron's per-parameter hook (TE v2.12
module/grouped_linear.py L180, L255-279, L314-330, L483-512, L794, L915; the same loops v2.9-v2.13, and the single
grouped weight of v2.14 on is opt-in). tools/te_grouped_ops.py timed it on CPU with the compiled extension as
stand-ins whose GEMMs are subtracted, at 1-32 local experts, in the glue's reference ops: the slope per expert and
grouped linear is 1.0 forward and 2.7 backward (formulas/constants.toml [transformer_engine]); the intercept is
the module call, already priced. Counted with the glue (same unit), per grouped linear module and local expert,
forward once and per re-run, backward once (where the module's call is eager):

    Qwen3-30B-A3B at EP 8: 16 x 2 x (1.0 + 2.7) = 118.4 reference ops = 0.45 ms per layer and micro-batch

A low-precision recipe's quantizers add their own per expert, forward / backward (precision.toml
`grouped_linear_expert_quantizer_*_ref_ops`, measured the same way, lower bounds; docs/host-time.md tegrouped2):
FP8 delayed 0.8 / 0.6, FP8 current 0.8 / 0.6, FP8 block 0.8 / 0.8, MXFP8 0.7 / 0.8, NVFP4 0.8 / 1.1.

**The dispatcher's device-to-host sync splits the micro-batch.** A dropless MoE layer waits once per forward for
its token counts on the host (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L586-596
`before_ep_alltoall` with EP or TP > 1, `before_finish` otherwise: TransformerEngine's grouped linear takes the
per-expert split sizes as a Python list; L956-958 `d2h_event.synchronize()`; the backward reuses the host's copy).
After it the GPU queue is empty and the host cannot run ahead into the next layer: a layer's forward takes
max(h, g) of its host and GPU times (plus about one kernel), and the backward, without a sync, overlaps as a whole.
Summed over the identical layers of a stage, a micro-batch with MoE layers takes

    max(H_f, G_f) + max(H_b, G_b)          instead of max(H, G)
    H_f = host_time of the first forward pass's kernels, expert GEMMs, module calls and glue (costs.py *_fwd)
    G_f = (compute - backward compute) + (GPU time - compute) / 2        (`gpu_forward_share`)

so the launch row is max(0, H_f - G_f) + max(0, H_b - G_b). It differs from max(0, H - G) only where the forward
and the backward are bound by different sides: the forward carries half of the module calls and more than half
of the glue but a third of the GEMM work, so a run near balance turns host-bound in the forward first.

**Within the forward: a two-block flow shop per layer.** The sync sits before the exchange, so from one sync to the
next the host issues the post-sync part of layer i (the exchange, the experts, the combine, the shared experts:
`Phase.after_dispatch_sync`), then the pre-sync part of layer i+1 (norms, attention, router, the dispatcher's
preprocess and first permutation), and waits. The GPU starts that segment idle and cannot run a kernel before the
host issues it; with each block's kernels interleaved with their issue (each block alone takes max(h, g)), the
segment takes the two-machine flow-shop makespan (Johnson 1954, two blocks in a fixed order):

    t_segment = max(h_post + h_pre, g_post + g_pre, h_post + g_pre)

(the last term: the pre-sync GPU work starts only once the post-sync block is issued). Summed over a stage's
identical layers, the forward takes max(H_f, G_f, H_post + G_pre) and the launch row becomes

    max(0, H_f - G_f, H_post - G_post) + max(0, H_b - G_b)
    H_post: host_time of the post-sync phases' first forward (costs.py *_post; the dispatch phase's glue is
            counted before the sync, so H_post is a lower bound)
    G_post: their forward compute + half of the exposed exchange (its forward dispatch and combine); the
            alltoall dispatcher's count all-gather is left out of it: the sync copies its result to the host, so
            it runs before the sync (token_dispatcher.py L557-576; the copy and the sync L927-958; docs/comm.md
            'countgather')

Syncs per layer, by dispatcher (dropless routing, `DISPATCHER_SYNCS`): one in the forward, none in the backward,
for the all-to-all dispatcher (above), DeepEP (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/fused_a2a.py
L107-108: the CPU waits for the GPU's received counts, "not compatible with CUDA graph"; the backward reuses the
handle) and HybridEP without a token budget (deepseek-ai/DeepEP @ 94a9f8f, branch hybrid-ep,
csrc/hybrid_ep/executor/executor.cu L164-166: `cudaStreamSynchronize` in the metadata preprocessing, which
deep_ep/hybrid_ep_buffer.py L358-378 runs only when the dispatch has no handle, i.e. forward; Megatron
token_dispatcher.py L1111-1112). Drop-and-pad (`moe_pad_expert_input_to_capacity`, token_dispatcher.py L517-540:
the sizes are known on the host) avoids the all-to-all dispatcher's and HybridEP's (`DROP_AND_PAD_SYNCS`,
`HYBRIDEP_DROP_AND_PAD_SYNCS`); what btacalc has no field for is HybridEP's static budget (`moe_expert_rank_capacity_factor`, L1098-1112), which a full-iteration CUDA graph needs, since a
graph cannot hold a host sync (experts.py L359-363); the one measured row with such a recipe (26.08, full-iteration
graph) is refused for its FP8 attention (docs/clock.md 'moe7').

**CUDA-graph scopes remove what they capture from the host.** Megatron's per-layer CUDA graphs
(`--cuda-graph-impl transformer_engine --cuda-graph-scope attn mlp moe_router moe_preprocess`; Megatron-LM @ 554ce493
megatron/training/arguments.py L1529-1542) capture whole parts of a layer; btacalc/data/cuda_graph_scopes.toml says
which catalogue phases each scope captures and which of their host counts (kernels, module calls, glue) the graph
takes over (config/cuda_graphs.py). TransformerEngine's implementation captures one callable per layer, whatever
its scopes (transformer_layer.py L989-1024), and replays it from a torch.autograd.Function: one forward graph and
one backward graph per layer and micro-batch (TransformerEngine @ d0067d0d transformer_engine/pytorch/graph.py
L1031-1097). So for a layer with any captured phase

    t_host = t_host(eager) - captured counts x their costs + 2 x launch_overhead_s

(a graph launch is one host API call like a kernel launch, taken at the profile's launch_overhead_s, an estimate;
no published cudaGraphLaunch host time was used; a module recomputed inside the graph re-runs inside the backward
graph, graph.py L966-975, so re-runs add no launch: mut35). GPU time is unchanged. Qwen3-30B-A3B, attn: 14
launches, 6 module calls and the dense layer's 316 glue ops become 2 launches, 1.9 ms less host time per layer and
micro-batch.

**Weight-gradient accumulation without fusion** (per micro-batch). With Megatron's gradient accumulation fusion
(its default with TransformerEngine) each weight-gradient GEMM accumulates straight into the fp32 main gradient:
TE's wgrad GEMM gets `out=main_grad`, `out_dtype=main_grad.dtype`, `accumulate=True` (TransformerEngine @ d0067d0d
transformer_engine/pytorch/module/linear.py L1231-1262; Megatron-LM @ d98e8a64 megatron/core/extensions/
transformer_engine.py L1293, L1524 pass `fuse_wgrad_accumulation=config.gradient_accumulation_fusion`). The GEMM's
epilogue reads and writes the main gradient, which the GEMM's memory floor counts (2 g B per result element,
rates.gemm_output_bytes). With `--no-gradient-accumulation-fusion` the GEMM writes a new gradient in the activation
dtype (`out=None`, `out_dtype=activation_dtype`, same lines; its floor then counts b B) and Megatron's backward hook
adds it to the main gradient,
`param.main_grad.add_(param.grad.data)` (megatron/core/distributed/distributed_data_parallel.py L578, once per
parameter and backward pass, i.e. per micro-batch): a separate elementwise kernel that reads the 16-bit gradient
and the main gradient and writes the main gradient back, at the streaming bandwidth:

    bytes per parameter and micro-batch = b + 2 g        (b: 16-bit gradient, 2 B; g: main gradient, 4 B fp32)
                                        = 2 + 2 x 4 = 10 B
    t_wgrad_accumulate = stage parameters per device x (b + 2 g) / (HBM bandwidth x f_stream)

counted over every parameter of the stage (the device's model-parallel shard; the main-gradient buffer is whole
on every data-parallel rank: the distributed optimizer shards only the optimizer state). The few parameters that
take the hook's add even with fusion (norm weights, the word embedding: not TE linears) are counted only here,
without fusion, an undercount of the fused default that btacalc keeps (the Megatron CI's 7B model at TP 4: its
embedding's 131,584 x 4,096 / 4 = 0.13 B of the device's 1.7 B parameters, 0.46 ms per micro-batch on an H100).

The MoE router, permute (dispatch) and unpermute (combine) kernels are phases of the catalogue with
their own HBM traffic (formulas/moe.toml), so their bandwidth-bound time is already in the layer's
rooflines (rows `router`, `dispatch`, `combine` of the breakdown).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...catalogue.constants import constants
from ..arrays import maximum, where
from ..params import param_counts
from ..problem import Problem
from .collectives import ring_share, ring_time

if TYPE_CHECKING:
    from ..params import ParamCounts

GRAD_NORM_BYTES = 4  # one fp32 partial sum of squares per rank (clip_grads.py: total_norm as a float tensor)


@dataclass(frozen=True)
class FixedCosts:
    """Per-step fixed costs of one pipeline stage (seconds)."""

    optimizer_s: Any
    grad_norm_s: Any
    weight_cast_s: Any = 0.0  # low precision: the quantised weight copies, cast once per step (precision.py)

    @property
    def total_s(self) -> Any:
        return self.optimizer_s + self.grad_norm_s + self.weight_cast_s


def optimizer_bytes_per_param(rates: dict[str, int], remainders: bool = False) -> int:
    """HBM bytes the Adam update moves per local parameter (module docstring): gradient read, optimizer state
    read and written, 16-bit weight written, and read too where the master weights are its int16 remainders."""
    return rates["gradients"] + 2 * rates["optimizer"] + (2 if remainders else 1) * rates["weights"]


def local_params(problem: Problem, dense: Any, expert: Any) -> Any:
    """Parameters whose optimizer state this device holds: its model-parallel shard, divided by the ZeRO
    shard group (DP·CP dense, EDP experts) when the optimizer state is sharded (ZeRO >= 1)."""
    lay = problem.layout
    sharded = lay.zero_stage >= 1
    return dense / where(sharded, lay.sharding_ranks, 1) + expert / where(sharded, lay.expert_data_parallel, 1)


def fixed_costs(problem: Problem, dense: Any, expert: Any, rates: dict[str, int]) -> FixedCosts:
    """Optimizer update and gradient norm of a stage holding `dense` + `expert` parameters per device."""
    hbm = problem.hardware.memory.streaming_bandwidth_bytes_per_s()  # elementwise kernels: B_HBM x f_stream
    params = local_params(problem, dense, expert)
    optimizer = params * optimizer_bytes_per_param(rates, problem.features()["master"] == "remainders") / hbm
    n = problem.layout.devices
    scalar = constants().collectives.all_reduce * ring_share(n) * GRAD_NORM_BYTES
    norm = params * rates["gradients"] / hbm + ring_time(problem, scalar, n, 1, 1, constants().collectives.all_reduce)
    return FixedCosts(optimizer, norm)


def wgrad_accumulate_bytes_per_param(bytes_per_element: int, gradient_bytes: int) -> int:
    """HBM bytes of the unfused weight-gradient add per parameter (module docstring): the 16-bit gradient read,
    the main gradient read and written."""
    return bytes_per_element + 2 * gradient_bytes


def wgrad_accumulate_s(problem: Problem, params: Any) -> Any:
    """Per micro-batch: the separate main-gradient add of `params` parameters without gradient accumulation fusion
    (module docstring), 0 with it. The main gradient's bytes are the run's `gradient_bytes`, the field the fused
    path's wgrad GEMM reads in gpu/costs.py (not the catalogue's state rate `bytes_per_param()["gradients"]`, which
    is the 16-bit element when the main gradient is not fp32 and differs for a run with other than 2-byte elements)."""
    if problem.run.gradient_accumulation_fusion:
        return 0.0
    hbm = problem.hardware.memory.streaming_bandwidth_bytes_per_s()
    return params * wgrad_accumulate_bytes_per_param(problem.run.bytes_per_element, problem.run.gradient_bytes) / hbm


def fsdp2_copy_bytes(counts: "ParamCounts", bytes_per_element: int, reduce_bytes: int) -> Any:
    """HBM bytes per micro-batch of FSDP2's copies on the compute stream (torch 2.4, the nightly torchtitan @ 157a12c5
    names; docs/runs.md "fsdp2" has the stream of each and the versions read):

    - all-gather copy-out: `foreach_all_gather_copy_out` splits each gathered buffer into the parameters' own tensors
      with `torch.split_with_sizes_copy` on the current stream after waiting for the all-gather
      (torch/distributed/_composable/fsdp/_fsdp_collectives.py), reading and writing every gathered element in the
      param dtype: 2 beta B each, for every gather of the micro-batch. The blocks but the last gather twice (forward,
      and again before the backward), the last block and the root once (collectives.sharded_calls_per_micro_batch):
      2 x total - root - one block elements, root = total - non-embedding (the embedding and the output layer; the
      final norm, h elements in the non-embedding count, goes with the blocks);
    - reduce-scatter copy-in: `foreach_reduce_scatter_copy_in` chunk-cats every block's unsharded gradient into the
      reduce-scatter input in the reduce dtype (`torch._chunk_cat`), on the reduce-scatter stream, which the compute
      stream then waits for (`current_stream.wait_stream(reduce_scatter_stream)`): beta read + reduce bytes written
      per element, once per micro-batch.

    FSDP1's flat parameter makes no copy-out: its parameters are views into the gathered buffer (torch 2.1
    torch/distributed/fsdp/_flat_param.py `_get_unflat_views_unaligned`); its own casts are not timed."""
    gathered = 2 * counts.total - (counts.total - counts.non_embedding) - counts.per_layer
    return gathered * 2 * bytes_per_element + counts.total * (bytes_per_element + reduce_bytes)


def fsdp2_copy_s(problem: Problem, device: "tuple[Any, Any, Any] | None" = None) -> Any:
    """Per micro-batch: FSDP2's copies on the compute stream at the device's streaming bandwidth (fsdp2_copy_bytes);
    0 under any other FSDP or without one (the parameter counts are taken only then: this runs on every stage).
    `device`: (all, root unit, largest block) parameters on this device (`fsdp2_device_counts`), what FSDP2 gathers
    and reduces beside tensor parallelism; with TP 1 the model's own counts are the device's."""
    lay = problem.layout
    if not lay.fsdp2:
        return 0.0
    hbm = problem.hardware.memory.streaming_bandwidth_bytes_per_s()
    counts = param_counts(problem)
    beta, reduce_bytes = problem.run.bytes_per_element, problem.run.gradient_bytes
    whole = fsdp2_copy_bytes(counts, beta, reduce_bytes)
    if device is None:
        return whole / hbm
    # (TP may be an array of a search's layouts)
    return where(lay.tensor_parallel > 1, fsdp2_copy_bytes(fsdp2_device_counts(counts, *device), beta, reduce_bytes),
                 whole) / hbm


def fsdp2_device_counts(counts: "ParamCounts", total: Any, root: Any, block: Any) -> "ParamCounts":
    """The counts fsdp2_copy_bytes reads, per device under torchtitan's 2-D FSDP2 x TP: FSDP2's units hold DTensor
    shards, so a device all-gathers over its data-parallel group and copies out its TP shard of each unit
    (pytorch/torchtitan @ 820504e2 torchtitan/models/llama3/parallelize_llama.py L90-98: fully_shard over the dp
    mesh after apply_tp, L344-367 the units). `total`: this device's parameters (TP-split weights / TP, replicated
    norms whole); `root`: the root unit's, the embedding, final norm and output layer (L367, `fully_shard(model)`);
    `block`: the largest block's. The root's final norm goes with the root here (with TP 1 with the blocks: the
    model's non-embedding count has it)."""
    return replace(counts, total=total, non_embedding=total - root, per_layer=block)


def host_time(problem: Problem, kernels: Any, expert_gemms: Any = 0, module_calls: Any = 0, glue_ops: Any = 0) -> Any:
    """CPU time to issue a micro-batch's kernels, per-expert GEMMs, layer-module calls and the layers' eager glue
    (reference-op equivalents) on a stage (module docstring); 0 without [kernels]; a profile without
    `module_host_s` or `eager_op_host_s` does not count the module calls or the glue."""
    k = problem.hardware.kernels
    if k is None:
        return 0.0
    per_expert = k.expert_gemm_host_s if k.expert_gemm_host_s is not None else k.launch_overhead_s
    per_module = k.module_host_s.value if k.module_host_s is not None else 0.0
    per_op = k.eager_op_host_s.value if k.eager_op_host_s is not None else 0.0
    return (kernels * k.launch_overhead_s.value + expert_gemms * per_expert.value + module_calls * per_module
            + glue_ops * per_op)


def gpu_forward_share(compute_s: Any, backward_s: Any, gpu_time_s: Any) -> Any:
    """The forward pass's part of a micro-batch's GPU time: its compute less the backward's (a re-run counts
    with the forward here, an approximation), plus half of the rest (communication and the other per-micro-batch
    terms: each forward collective has its backward twin)."""
    return (compute_s - backward_s) + (gpu_time_s - compute_s) / 2


@dataclass(frozen=True)
class DispatcherSyncs:
    """Host-device syncs a dropless MoE layer's dispatcher makes in its forward (module docstring; none in the
    backward for every dispatcher btacalc expresses)."""

    forward_per_layer: int
    source: str


DISPATCHER_SYNCS = {
    "alltoall": DispatcherSyncs(1, "Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py "
                                   "L586-605 (cuda_sync_point before_ep_alltoall, before_finish), L956-958"),
    "flex": DispatcherSyncs(1, "DeepEP: Megatron-LM @ d98e8a64 megatron/core/transformer/moe/fused_a2a.py L107-108; "
                               "HybridEP: deepseek-ai/DeepEP @ 94a9f8f csrc/hybrid_ep/executor/executor.cu L164-166"),
    "allgather": DispatcherSyncs(1, "Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L320 "
                                    "(dispatch_postprocess: tokens_per_expert = self.local_map.sum(dim=0).long().cpu(), "
                                    "forward only; the backward reuses the saved map)"),
}


# Megatron's alltoall dispatcher under drop-and-pad (RunOptions.pad_to_capacity): every expert takes exactly its
# capacity, so preprocess returns before any sync point is set and the CPU never waits for the GPU's counts
DROP_AND_PAD_SYNCS = DispatcherSyncs(0, "Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py "
                                        "L517-540 (drop_and_pad: the sizes from the capacity, on the host; preprocess "
                                        "returns before _maybe_update_cuda_sync_point), L457 (cuda_sync_point "
                                        "no_sync)")


# HybridEP under drop-and-pad (review22): the permuted token count is the capacity's, known on the host, so its dispatch
# runs non-blocking and makes no cudaStreamSynchronize (the same mechanism as its static budget)
HYBRIDEP_DROP_AND_PAD_SYNCS = DispatcherSyncs(0, "Megatron-LM @ d98e8a64 megatron/core/transformer/moe/"
                                                 "token_dispatcher.py L1113-1127 (drop_and_pad: num_permuted_tokens "
                                                 "from the capacity), fused_a2a.py L415-417 (non_blocking when it is "
                                                 "given); deepseek-ai/DeepEP @ 94a9f8f csrc/hybrid_ep/executor/"
                                                 "executor.cu L164-167 (the sync only when blocking)")


def dispatcher_syncs(problem: Problem) -> DispatcherSyncs:
    """The syncs of the layout's dispatcher (`Layout.dispatcher`): DeepEP / HybridEP (Megatron's flex dispatcher)
    with `deepep`, the allgather dispatcher with `allgather_dispatcher`, else the all-to-all dispatcher; the
    all-to-all dispatcher and HybridEP make none under drop-and-pad."""
    lay = problem.layout
    if problem.run.pad_to_capacity and (lay.dispatcher == "alltoall" or lay.hybridep):
        return DROP_AND_PAD_SYNCS if lay.dispatcher == "alltoall" else HYBRIDEP_DROP_AND_PAD_SYNCS
    return DISPATCHER_SYNCS[lay.dispatcher]


@dataclass(frozen=True)
class SyncSplit:
    """A micro-batch's host and GPU times split by the dispatcher's sync (seconds): the whole micro-batch, its
    first forward pass, and the part of that forward issued after the syncs (`Phase.after_dispatch_sync`)."""

    host_s: Any
    gpu_s: Any
    host_forward_s: Any
    gpu_forward_s: Any
    host_post_s: Any = 0.0
    gpu_post_s: Any = 0.0


def launch_time_synced(t: SyncSplit) -> Any:
    """Exposed host time of a micro-batch whose MoE layers wait for the dispatcher's device-to-host copy once
    per layer forward (module docstring): the backward takes max(H_b, G_b); the forward, a chain of segments
    from one sync to the next (the post-sync part of a layer, then the pre-sync part of the next), takes
    max(H_f, G_f, H_post + G_pre) (the two-block flow shop: the pre-sync GPU work cannot start before its
    kernels are issued, after the post-sync part's), so the launch row is

        max(0, H_f - G_f, H_post - G_post) + max(0, H_b - G_b)."""
    forward = maximum(maximum(0.0, t.host_forward_s - t.gpu_forward_s), t.host_post_s - t.gpu_post_s)
    return forward + maximum(0.0, (t.host_s - t.host_forward_s) - (t.gpu_s - t.gpu_forward_s))


def launch_time(host_s: Any, gpu_time_s: Any) -> Any:
    """Exposed host issue time of a micro-batch on a stage: what of its `host_time` its GPU time does not
    hide (0 where the profile has no [kernels]: its host time is 0)."""
    return maximum(0.0, host_s - gpu_time_s)
