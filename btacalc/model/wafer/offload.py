"""Activations held off the wafer (Cerebras R2.0+ "dynamic memory offload") and what they cost the link.

Cerebras' release 2.0 made large GPT models up to 50% faster through "dynamic memory offload": weights
already live off the wafer (MemoryX), and activations that do not fit the 40 GB of SRAM now do too
(https://www.cerebras.ai/blog/cerebras-software-release-2.0-50-faster-training-pytorch-2.0-support-diffusion-transformers-and-more).
The appliance's logs name "weight and activation servers", and ALCF's CS-3 cluster lists four activation
servers (https://docs.alcf.anl.gov/ai-testbed/cerebras/). What the compiler then holds shows in
LLaMA-7B's compile log (btacalc/data/measured_runs.json, llama-7b-wse2-1-400): one micro-batch of 99
sequences of 2,048, whose layer-input checkpoints alone (full recomputation) are
32 x 2048 x 99 x 4096 x 2 B = 53 GB, more than the SRAM.

btacalc's model of it (the policy is not published; an estimate stated as such):

- what is kept: the activations that live from one phase to a later one, the stored checkpoints S_ckpt
  (all layers) and the layer's recomputed activations R (live through its backward), stay in SRAM as far
  as they fit beside what cannot leave (the largest phase's working set, the weight and gradient
  buffers: W); the rest, S_off, goes out. At least `KEPT_LAYERS` layers' checkpoints stay on the wafer
  (the one being written out while the next layer computes, the one being read back while the layer
  above runs backward), so with S = S_ckpt + R and K the bytes kept:
      K = min(S, max(usable - W, KEPT_LAYERS x S_layer)),   S_off = S - K,   fits iff W + K <= usable;
  the checkpoints are kept first, the recomputed activations take what is left of K;
- what it costs: S_off leaves and comes back, 2 S_off bytes per micro-batch: the offloaded checkpoints
  leave during forward and come back during backward; the offloaded part of R is written out as the layer's
  backward recomputes it and read back as the backward uses it (both inside the backward: reported apart,
  `recompute_offloaded`), over the system I/O at the profile's `activation_offload_bandwidth_bytes_per_s` (assumed
  the weight stream's link). It fills the time the link is idle while the wafer computes, and only the
  rest shows:
      t_offload = max(0, 2 S_off / r_act - (t_micro_batch - t_stream))
  with t_stream the micro-batch's weight-stream time (timing.py) and t_micro_batch its phase time.
  LLaMA-7B at one micro-batch of 99: about 40 GB out and back, 0.55 s at 150 GB/s, inside a 4.8 s step
  whose weight stream takes 0.2 s, so it is hidden and the 99-sequence micro-batch fits.
A profile without `activation_offload_bandwidth_bytes_per_s` offloads nothing (the SRAM holds every
checkpoint, as before); a resident plan never offloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..problem import Problem

KEPT_LAYERS = 2  # estimate: one layer's checkpoints going out, one coming back (double buffering)


@dataclass(frozen=True)
class ActivationSplit:
    """A micro-batch's checkpoints and recomputed activations: bytes of each kept in SRAM, bytes held off
    the wafer."""

    stored_on_wafer: Any
    recompute_on_wafer: Any
    offloaded: Any
    recompute_offloaded: Any = 0  # the part of `offloaded` that is recomputed activations (review36)


def offload_bandwidth(problem: Problem) -> Any:
    """r_act in bytes/s, or None when the plan cannot offload (no profile value, or not weight streaming)."""
    bw = problem.hardware.memory.activation_offload_bandwidth_bytes_per_s
    if problem.memory_model != "weight_streaming" or bw is None:
        return None
    return bw.value


def split_activations(problem: Problem, stored: Any, recompute: Any, one_layer: Any, other_bytes: Any,
                      usable: float) -> ActivationSplit:
    """Keep the checkpoints `stored` and the recomputed activations `recompute` in SRAM as far as they fit
    beside `other_bytes`, at least KEPT_LAYERS x `one_layer`; the rest is offloaded (module docstring).
    Works on ints and numpy arrays."""
    if offload_bandwidth(problem) is None:
        return ActivationSplit(stored, recompute, 0)
    kept = _min(stored + recompute, _max(usable - other_bytes, KEPT_LAYERS * one_layer))
    stored_kept = _min(stored, kept)
    return ActivationSplit(stored_kept, kept - stored_kept, stored + recompute - kept, recompute - (kept - stored_kept))


def _min(a: Any, b: Any) -> Any:
    """Elementwise minimum; Python's on scalars (exact on ints of any size, where numpy would overflow)."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def _max(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def exposed_offload_s(problem: Problem, offloaded: Any, micro_batch_s: Any, stream_s: Any) -> Any:
    """t_offload = max(0, 2 S_off / r_act - (t_micro_batch - t_stream)) (module docstring)."""
    bw = offload_bandwidth(problem)
    if bw is None:
        return 0.0
    return np.maximum(0.0, 2 * offloaded / bw - (micro_batch_s - stream_s))
