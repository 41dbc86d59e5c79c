"""The compute of a training step: FLOPs, the GPU's peak, and the time the
GEMMs, the attention and the memory-bound kernels take on one rank.

Three parts, each closed form:

* **FLOPs** (:func:`model_flops_per_token`): the model FLOPs of one token,
  forward and backward, as NVIDIA's performance tables and Megatron-LM
  count them (6 x the weights a token goes through, the output layer
  included, plus causal attention at the sequence length: ``3 s n_heads
  (d_qk + d_v)`` a layer). A MoE layer counts its ``top_k`` and shared
  experts and its router. Recomputation adds forward FLOPs to the time
  but not to the model FLOPs (MFU is model FLOPs over peak, as published).
* **The GPU** (:class:`GpuFigures`): dense peak TFLOP/s per dtype (bf16,
  fp8, mxfp8, nvfp4; fp32 runs at TF32), HBM bandwidth and memory, from
  the inventory's GPU model (:data:`GPU_PRESETS`, NVIDIA's datasheets) or
  the inventory's ``cost: gpu_compute:`` entry for any other model.
* **Time on a rank** (:func:`stage_compute`): every GEMM of a layer with
  its shape on the rank after TP, CP and EP splitting, priced as
  ``flops / (peak x efficiency)`` plus its bytes over HBM plus a fixed
  time a call (``gemm_latency_us``: a small matrix is slower per FLOP, a
  thin one memory-bound, and a layer split into many small expert GEMMs
  pays the fixed time of each); attention at its own efficiency of the bf16 peak; the
  memory-bound kernels (norms, activations, casts, MoE permutation, the
  loss over the vocabulary) as bytes over HBM. The constants
  (:class:`ComputeFit`) are few, named, and fitted by
  ``bench/step_fit.py`` on the declared fit set of published training
  runs (tests/fixtures/training_runs/fit-set.yaml; docs/cost-model.md,
  "The whole step").

Pure; no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Dict, List, Mapping, Optional, Tuple

from slurmtopo.cost.defaults import DEFAULT_PCIE_GBPS
from slurmtopo.cost.model_spec import ModelSpec

__all__ = ["GpuFigures", "GPU_PRESETS", "HOST_LINK_GBPS", "host_link_gbps", "GPU_DTYPES",
           "ComputeFit", "FIT", "Dims",
           "ATTENTION_EFFICIENCY", "ATTENTION_BACKWARD",
           "ATTENTION_HALF_HEAD", "EAGER_NORM_BYTES", "EAGER_GLU_BYTES", "EAGER_ROPE_BYTES",
           "eager_bytes", "StageCompute", "gpu_figures", "parse_gpu_compute", "model_flops_per_token",
           "step_model_flops", "stage_compute", "optimizer_seconds", "gemm_seconds", "placement_gpu"]

#: the dtypes a GPU's peak is given for (fp32 training runs on TF32)
GPU_DTYPES = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32")
#: a dtype the GPU has no tensor cores for runs at the next one it has
_FALLBACK = {"nvfp4": "mxfp8", "mxfp8": "fp8", "fp8": "bf16", "fp16": "bf16", "bf16": "fp16"}


@dataclass(frozen=True)
class GpuFigures:
    """One GPU model's compute: dense TFLOP/s per dtype, HBM GB/s, GiB."""

    name: str
    tflops: Tuple[Tuple[str, float], ...]
    hbm_gbps: float
    memory_gib: float = 0.0
    #: exponentials a second (tera) of the special-function units, which
    #: bound attention's softmax (0: not known, no such bound)
    exp_tops: float = 0.0
    #: the board power the datasheet's peaks are given at, and the limit the
    #: GPUs run under (``cost: gpu_compute: {model: {power_w: 500}}``; 0:
    #: the datasheet's)
    tdp_w: float = 0.0
    power_w: float = 0.0

    def peak(self, dtype: str) -> Tuple[float, str]:
        """(FLOP/s, the dtype that runs) for a GEMM in ``dtype``: a dtype
        the GPU lacks (fp8 on an A100) runs at the next wider one."""
        table = dict(self.tflops)
        d = dtype
        for _ in range(len(_FALLBACK) + 1):
            if table.get(d):
                return table[d] * 1e12, d
            d = _FALLBACK.get(d, "bf16")
        return max(table.values()) * 1e12, dtype

    @property
    def power_clock(self) -> float:
        """The share of its datasheet clock a GPU held under a lower power
        limit sustains: dynamic power goes as clock x voltage squared and
        the voltage with the clock, so the clock as the cube root of the
        power (``(power_w / tdp_w) ** (1/3)``; 1 at the datasheet's power
        or above, or when either is unknown)."""
        if not self.tdp_w or not self.power_w or self.power_w >= self.tdp_w:
            return 1.0
        return (self.power_w / self.tdp_w) ** (1.0 / 3.0)


def _gpu(name, bf16, fp8=0.0, fp4=0.0, hbm=0.0, tf32=0.0, fp16=0.0, mx=None, exp=0.0,
         tdp=0.0):
    t = (("bf16", bf16), ("fp16", fp16 or bf16), ("fp8", fp8), ("mxfp8", fp8 if mx is None
                                                                else mx),
         ("nvfp4", fp4), ("fp32", tf32 or bf16 / 2))
    return GpuFigures(name, tuple((k, float(v)) for k, v in t if v), float(hbm), 0.0, exp,
                      float(tdp))


#: GPU model substring (lower case, matched against the inventory's GPU
#: name, first match wins) -> dense peaks and HBM bandwidth, from NVIDIA's
#: datasheets: A100 (SXM4, 312 bf16; 40 GB 1555 GB/s, 80 GB 2039 GB/s), H100
#: SXM5 and H800 (989 bf16, 1979 fp8, 3350 GB/s), H100 NVL (835, 1671, 3900),
#: H100 PCIe (756, 1513, 2000), H200 (H100's compute, 4800 GB/s), H20 (148,
#: 296, 4000), B200 (HGX B200: 2250 bf16, 4500 fp8, 9000 fp4, 8000 GB/s),
#: B300 (HGX B300: 2250, 4500, 13500 fp4, 8000 GB/s), GB200 (GB200 NVL72:
#: 2500, 5000, 10000, 8000 GB/s), GB300 (GB300 NVL72: 2500, 5000, 15000,
#: 8000 GB/s), L40S (362, 733, 864 GB/s), RTX A6000 (155, 768 GB/s), V100
#: (fp16 125, 900 GB/s). Sparsity is never counted. Exponentials a second
#: (softmax): H100 3.9 T (Shah et al. 2024, "FlashAttention-3", §1: "only
#: 3.9 TFLOPS of dedicated multi-function units"; H800 and H200 alike), A100
#: 2.4 T (108 SMs x 16 a clock x 1.41 GHz, the same count), B200 and GB200
#: 5 T, B300 and GB300 10.7 T (NVIDIA's Blackwell Ultra announcement: "2x
#: attention-layer acceleration", 10.7 TeraExponentials/s). Board power (the
#: datasheets'): A100 SXM 400 W, H100/H800/H200 SXM 700, H100 NVL 400, H100
#: PCIe 350, H20 400, B200 1000, B300 1100, GB200 1200, GB300 1400 (per GPU
#: of the NVL72 rack), L40S 350, RTX A6000 300, V100 300.
GPU_PRESETS: Tuple[Tuple[str, GpuFigures], ...] = (
    ("gb300", _gpu("GB300", 2500, 5000, 15000, 8000, 1250, exp=10.7, tdp=1400)),
    ("b300", _gpu("B300", 2250, 4500, 13500, 8000, 1100, exp=10.7, tdp=1100)),
    ("gb200", _gpu("GB200", 2500, 5000, 10000, 8000, 1250, exp=5.0, tdp=1200)),
    ("b200", _gpu("B200", 2250, 4500, 9000, 8000, 1100, exp=5.0, tdp=1000)),
    ("h200", _gpu("H200", 989, 1979, 0, 4800, 494, exp=3.9, tdp=700)),
    ("h100 nvl", _gpu("H100 NVL", 835, 1671, 0, 3900, 418, tdp=400)),
    ("h100 pcie", _gpu("H100 PCIe", 756, 1513, 0, 2000, 378, tdp=350)),
    ("h100", _gpu("H100", 989, 1979, 0, 3350, 494, exp=3.9, tdp=700)),
    ("h800", _gpu("H800", 989, 1979, 0, 3350, 494, exp=3.9, tdp=700)),
    ("h20", _gpu("H20", 148, 296, 0, 4000, 74, tdp=400)),
    ("a100-sxm4-40gb", _gpu("A100 40GB", 312, 0, 0, 1555, 156, exp=2.4, tdp=400)),
    ("a100", _gpu("A100", 312, 0, 0, 2039, 156, exp=2.4, tdp=400)),
    ("l40s", _gpu("L40S", 362, 733, 0, 864, 183, tdp=350)),
    ("a6000", _gpu("RTX A6000", 155, 0, 0, 768, 77, tdp=300)),
    ("v100", _gpu("V100", 0, 0, 0, 900, 0, fp16=125, tdp=300)),
)
#: GB/s each way between a GPU and its host's memory where that is not the
#: GPU's PCIe link, by GPU model substring (first match wins): Grace's
#: NVLink-C2C (GB200, GB300: 900 GB/s both ways, NVIDIA's GB200 NVL72 and
#: GB300 NVL72 datasheets), a PCIe 6 x16 link on B300 (HGX B300); any other
#: GPU its PCIe figure (:data:`~slurmtopo.cost.defaults.DEFAULT_PCIE_GBPS`,
#: the links' table), 25 for one it does not name
HOST_LINK_GBPS: Tuple[Tuple[str, float], ...] = (
    ("gb300", 450.0), ("gb200", 450.0), ("gh200", 450.0), ("b300", 100.0))


def host_link_gbps(gpu: "GpuFigures") -> float:
    """GB/s each way between ``gpu`` and host memory (:data:`HOST_LINK_GBPS`,
    else its PCIe link's)."""
    name = gpu.name.lower()
    for key, gbps in HOST_LINK_GBPS + DEFAULT_PCIE_GBPS:
        if key in name:
            return gbps
    return 25.0


#: a GPU model no entry matches (and the inventory does not describe):
#: H100's figures, said in the step's notes
_UNKNOWN = ("h100", dict(GPU_PRESETS)["h100"])


def gpu_figures(model: str, memory_mib: Optional[float] = None,
                table: Tuple[Tuple[str, GpuFigures], ...] = ()) -> Tuple[GpuFigures, bool]:
    """(figures, known) for the GPU named ``model``: the inventory's
    entries (``table``) first, then :data:`GPU_PRESETS`; ``known`` False
    when nothing matched (H100's figures are used). ``memory_mib`` (the
    inventory's) sets the memory."""
    m = (model or "").lower()
    found, known = _UNKNOWN[1], False
    for key, figs in tuple(table) + GPU_PRESETS:
        if key in m:
            found, known = figs, True
            break
    if memory_mib:
        found = replace(found, memory_gib=memory_mib / 1024.0)
    return found, known


#: the fields of a ``cost: gpu_compute:`` entry besides the dtypes' peaks
_GPU_FIELDS = ("hbm_gbps", "power_w", "tdp_w")


def parse_gpu_compute(value, fail) -> Tuple[Tuple[str, GpuFigures], ...]:
    """The inventory's ``cost: gpu_compute:`` block: GPU model substring ->
    ``{bf16: TFLOP/s, fp8: ..., mxfp8: ..., nvfp4: ..., fp32: ..., hbm_gbps:
    GB/s, power_w: W, tdp_w: W}`` (dense peaks). A GPU no preset describes
    needs bf16 (or fp16) and hbm_gbps; an entry whose name matches a preset
    (``h100``) changes only the figures it gives, e.g. the power limit the
    GPUs run under (``{h100: {power_w: 500, hbm_gbps: 2400}}``). ``fail(msg,
    obj, key)`` makes the located error."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise fail(f"gpu_compute must be a mapping of GPU model -> figures, got {value!r}")
    allowed = ", ".join(GPU_DTYPES + _GPU_FIELDS)
    out = []
    for name, figs in value.items():
        if not isinstance(figs, Mapping):
            raise fail(f"gpu_compute.{name} must be a mapping of {allowed}", value, name)
        tflops, extra = [], {}
        for k, v in figs.items():
            key = str(k).lower()
            if key not in GPU_DTYPES + _GPU_FIELDS:
                raise fail(f"gpu_compute.{name}: unknown field {k!r} (allowed: {allowed})",
                           figs, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0 or v > 1e7:
                raise fail(f"gpu_compute.{name}.{k} must be a number > 0 (TFLOP/s, GB/s or W), "
                           f"got {v!r}", figs, k)
            if key in _GPU_FIELDS:
                extra[key] = float(v)
            else:
                tflops.append((key, float(v)))
        names = dict(tflops)
        base = next((f for key, f in GPU_PRESETS if key in str(name).lower()), None)
        if base is not None and not (names.get("bf16") or names.get("fp16")):
            merged = dict(base.tflops)
            merged.update(names)
            figures = replace(base, tflops=tuple(merged.items()),
                              hbm_gbps=extra.get("hbm_gbps", base.hbm_gbps),
                              power_w=extra.get("power_w", base.power_w),
                              tdp_w=extra.get("tdp_w", base.tdp_w))
        elif not (names.get("bf16") or names.get("fp16")) or not extra.get("hbm_gbps"):
            raise fail(f"gpu_compute.{name} needs bf16 (or fp16) TFLOP/s and hbm_gbps "
                       "(or a name that matches a known GPU, whose figures it changes)",
                       value, name)
        else:
            figures = GpuFigures(str(name), tuple(tflops), extra["hbm_gbps"],
                                 power_w=extra.get("power_w", 0.0),
                                 tdp_w=extra.get("tdp_w", 0.0))
        out.append((str(name).lower(), figures))
    return tuple(out)


@dataclass(frozen=True)
class ComputeFit:
    """The fitted constants of the compute model (docs/cost-model.md, "The
    whole step"; bench/step_fit.py fits them)."""

    #: share of the bf16 peak a large GEMM reaches
    gemm_efficiency: float = 0.8295
    #: share of its own peak a large GEMM reaches in fp8 with one scale a
    #: tensor, in mxfp8 (a scale every 32 values) and in nvfp4, as a factor
    #: on gemm_efficiency; nvfp4's is what training reaches with the
    #: recipe's quantization kernels around each GEMM, below the bare GEMM
    #: (docs/cost-model.md, "The GEMM pricing against micro-benchmarks")
    fp8_factor: float = 0.9117
    mxfp8_factor: float = 0.8093
    fp4_factor: float = 0.6939
    #: the fixed time of one GEMM call, microseconds, forward (backward
    #: twice): its launch, the tail of its last wave of tiles, the casts
    #: and scales of its operands. The model prices a layer's attention
    #: projections, its MLP, each local expert's MLP, the router and the
    #: output layer as one call each, so a MoE layer pays it once per local
    #: expert: fine-grained experts (many small GEMMs a rank) run below
    #: the peak a large GEMM reaches
    gemm_latency_us: float = 43.01
    #: bytes the memory-bound kernels move a token and layer, per value of
    #: the hidden and active MLP width (2-byte values; forward and backward)
    elementwise_passes: float = 57.41
    #: 2-byte values MoE's permutation moves a routed token and hidden
    #: value, forward and backward: forward the token read and written to
    #: its expert's buffer and its output read back into the weighted sum
    #: (3), backward the same for the gradient (3). Not fitted: counted from
    #: what the dispatcher does
    moe_passes: float = 6
    #: the share of an overlapped collective's time the step still pays: its
    #: kernels hold SMs and memory bandwidth the compute it hides behind
    #: would use
    overlap_cost: float = 0.2717
    #: the share of its datasheet clocks a GPU sustains in training, by GPU
    #: name, relative to H100's (Blackwell parts differ by power: GB300 at
    #: 1.4 kW, B200 at 1 kW); a GPU not listed: 1
    sustained: Tuple[Tuple[str, float], ...] = (
        ("B200", 0.957), ("B300", 0.9587), ("GB200", 0.8852), ("GB300", 1.093))

    def factor(self, dtype: str) -> float:
        return {"fp8": self.fp8_factor, "mxfp8": self.mxfp8_factor,
                "nvfp4": self.fp4_factor}.get(dtype, 1.0)

    def clock(self, gpu: "GpuFigures") -> float:
        return dict(self.sustained).get(gpu.name, 1.0) * gpu.power_clock


#: share of the bf16 peak attention's kernels reach at a head width of 128,
#: forward and backward (causal, 4K-8K tokens): fused attention (cuDNN's,
#: Transformer Engine's; FlashAttention-3's class) and FlashAttention-2's
#: (PyTorch's scaled dot-product attention, the flash-attn package).
#: Published, not fitted: FlashAttention-3 (Shah et al. 2024, Fig. 5 and 6)
#: reaches about 600 TFLOP/s forward and 450 backward on H100 at those
#: lengths, FlashAttention-2 350 and 300 ("only 35% utilization on H100",
#: §1); the same shares are taken for every GPU
ATTENTION_EFFICIENCY = {"fused": (0.60, 0.45), "flash2": (0.35, 0.30)}
# the attention kernels a framework runs (Megatron-LM and NeMo through
# Transformer Engine's fused (cuDNN) attention, the others PyTorch's SDPA
# or flash-attn 2) are each framework's ``attention_kernel``
# (slurmtopo.job.frameworks)

#: flash attention's backward pass over its forward: five products (the
#: scores recomputed, dV, dP, dQ, dK) against the forward's two
ATTENTION_BACKWARD = 2.5
#: the head width at which attention's products would run at half the
#: speed of very wide heads: FlashAttention-3's published forward
#: throughput on H100 (Shah et al. 2024, Fig. 5: about 490, 640 and 740
#: TFLOP/s at head widths 64, 128 and 256, causal, 16K tokens) is
#: ``1 / (1 + 54 / d)`` of a common figure within 3%. The attention
#: efficiencies above are given at width 128
ATTENTION_HALF_HEAD = 54.0


#: bytes a value the memory-bound kernels of a Llama-family layer move
#: forward when PyTorch runs them eagerly, beyond what the fused kernels
#: the fit describes move (2-byte activations; counted from the kernels
#: torchtitan's model code launches, not fitted): RMSNorm (x.float(),
#: pow, mean, the product with rsqrt, the cast back, the weight: 36 bytes
#: a value against a fused kernel's 4), twice a layer over the hidden
#: width (and MLA's two latent norms); SwiGLU (silu, then the product: 10
#: against 6) over the MLP's active width; the rotary embedding (x.float(),
#: the complex product, the cast back: 20 against 4) over the query and
#: key widths that rotate. Backward moves twice the forward, as the other
#: memory-bound kernels. torch.compile fuses them (compile=on)
EAGER_NORM_BYTES = 32.0
EAGER_GLU_BYTES = 4.0
EAGER_ROPE_BYTES = 16.0


FIT = ComputeFit()


@dataclass(frozen=True)
class Dims:
    """A layout's parallel sizes, framework-neutral: tensor, context,
    pipeline, expert and expert-tensor parallel, all data parallel (DDP
    replicas x FSDP/ZeRO shards), virtual pipeline stages."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    dp: int = 1
    vp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class StageCompute:
    """One micro-batch on a rank of the slowest pipeline stage, in seconds:
    forward, backward and the recomputed forward, with the parts of the
    sum (gemm, expert_gemm, attention, elementwise, moe, logits)."""

    forward_s: float
    backward_s: float
    recompute_s: float
    parts: Tuple[Tuple[str, float], ...] = field(default=())
    #: the layers of that stage, and the dtype the GEMMs ran in
    layers: int = 0
    dtype: str = "bf16"
    #: the memory-bound kernels priced as eager PyTorch runs them (a model
    #: whose eager kernels cost more than fused ones: :func:`eager_bytes`)
    eager: bool = False

    @property
    def microbatch_s(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s


def gemm_seconds(m: float, n: float, k: float, gpu: GpuFigures, dtype: str,
                 fit: ComputeFit = FIT, in_bytes: Optional[float] = None) -> float:
    """Seconds of one (m x k) @ (k x n) GEMM on ``gpu`` in ``dtype``."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    peak, ran = gpu.peak(dtype)
    eff = fit.gemm_efficiency * fit.factor(ran) * fit.clock(gpu)
    flops = 2.0 * m * n * k
    b = in_bytes if in_bytes is not None else {"fp8": 1, "mxfp8": 1, "nvfp4": 0.5,
                                               "fp32": 4}.get(ran, 2)
    moved = (m * k + k * n) * b + m * n * 2
    return flops / (peak * eff) + moved / (gpu.hbm_gbps * 1e9) + fit.gemm_latency_us * 1e-6


def _attention_flops(spec: ModelSpec, seq: int, causal: bool = True) -> float:
    """Forward FLOPs of the score and value products of all layers for one
    query token against ``seq`` keys (causal: half of them on average)."""
    s = spec.resolved()
    width = s.heads * (s.head_dim + s.rope_head_dim + s.v_head_dim)
    full = s.layers - (s.window_layers if s.window else 0)
    total = full * 2.0 * width * (seq / 2.0 if causal else seq)
    if s.window and s.window_layers:
        total += s.window_layers * 2.0 * width * min(s.window, seq / 2.0 if causal else seq)
    return total


def model_flops_per_token(spec: ModelSpec, causal: bool = True) -> float:
    """Model FLOPs of one token, forward and backward (the MFU numerator of
    NVIDIA's and Megatron-LM's tables: 6 x the weights a token goes
    through, output layer included, input embedding not, plus attention;
    ``causal`` False counts attention over the whole sequence as
    Megatron-LM's r0.8 formula did)."""
    s = spec.resolved()
    return 6.0 * (s.active_params() - 0.0) + 3.0 * _attention_flops(s, s.seq_len, causal)


def step_model_flops(spec: ModelSpec, sequences: int) -> float:
    """Model FLOPs of a step of ``sequences`` sequences."""
    return model_flops_per_token(spec) * sequences * spec.seq_len


def eager_bytes(spec: ModelSpec, width: float) -> float:
    """Bytes a token's memory-bound kernels move forward in one layer when
    run eagerly, beyond the fused kernels' (:data:`EAGER_NORM_BYTES` and
    the others): a gated MLP (``glu``) is taken as the Llama family's
    (RMSNorm, SwiGLU, rotary embedding); a plain one as GPT's, whose
    LayerNorm and GELU are single kernels in eager PyTorch too (0).
    ``width`` is the MLP's active width (the dense ``ffn``, or the routed
    and shared experts' together)."""
    s = spec.resolved()
    if not s.glu:
        return 0.0
    norms = 2.0 * s.hidden + s.q_lora_rank + s.kv_lora_rank
    if s.kv_lora_rank:
        rope = (s.heads + 1) * s.rope_head_dim  # MLA rotates a slice of q and one shared k
    else:
        rope = (s.heads + (s.kv_heads or s.heads)) * s.head_dim
    return EAGER_NORM_BYTES * norms + EAGER_GLU_BYTES * width + EAGER_ROPE_BYTES * rope


def stage_compute(spec: ModelSpec, dims: Dims, gpu: GpuFigures,
                  fit: ComputeFit = FIT, attention: str = "fused",
                  selective: str = "per-op", eager: bool = False) -> StageCompute:
    """The compute of one micro-batch on a rank of the slowest pipeline
    stage (the one with the output layer and the loss).

    Tokens a micro-batch on a rank: ``T = micro_batch x seq_len / cp``.
    Per layer, forward, on one rank (tensor-parallel sizes split the
    GEMMs' n or k, sequence parallelism the memory-bound kernels' tokens):
    the attention projections (``T x h`` by ``h x attn/tp``), the dense MLP
    or, in a MoE layer, each local expert's GEMM on its ``T top_k ep etp /
    (experts tp)`` tokens plus the shared experts, attention
    (``2 T (s/2) heads (d_qk + d_v) / tp`` FLOPs at
    :data:`ATTENTION_EFFICIENCY` of the bf16 peak, of fused kernels
    (``attention="fused"``) or FlashAttention-2's (``"flash2"``), and the
    softmax's exponentials at the GPU's rate), the memory-bound kernels
    (``elementwise_passes x 2 bytes x T/tp x (h + active MLP width)``), MoE
    permutation (``moe_passes x 2 bytes x T/tp x top_k x h``). The last
    stage adds the output layer (in bf16) and the loss over the
    vocabulary. Backward is twice the forward, attention's
    :data:`ATTENTION_BACKWARD` times its products (the exponentials once
    again); recomputation adds the forward again (``full``; of
    ``recompute_layers`` layers of each model chunk when given) or, ``selective``,
    the attention and memory-bound kernels (PyTorch's per-op checkpointing)
    or, where the framework's selective recomputation is Megatron-LM's
    (``selective="attention"``), the forward of its ``recompute_modules``
    (core_attn when none are named). ``eager``: the framework runs the
    memory-bound kernels eagerly (:func:`eager_bytes` more a token and
    layer, forward). Compute-bound
    parts run at the GPU's clock under its power limit
    (:attr:`GpuFigures.power_clock`).
    """
    s = spec.resolved()
    tp, cp, pp = max(1, dims.tp), max(1, dims.cp), max(1, dims.pp)
    ep, etp = max(1, dims.ep), max(1, dims.etp)
    dt = s.dtype
    T = s.micro_batch * s.seq_len / cp
    h = s.hidden
    hbm = gpu.hbm_gbps * 1e9
    bf16_peak, _ = gpu.peak("bf16")

    def gemm(m, n, k, dtype=dt):
        return gemm_seconds(m, n, k, gpu, dtype, fit)

    attn_proj = gemm(T, s.attention_params() / (h * tp), h)
    attn_core = 2.0 * T * s.heads * (s.head_dim + s.rope_head_dim + s.v_head_dim) / tp
    # the softmax's exponentials: one a score forward, and again backward
    # (flash attention recomputes the scores)
    exp_rate = gpu.exp_tops * 1e12
    exps = T * s.heads / tp if exp_rate else 0.0
    kv_len = s.seq_len / 2.0
    eff_f, eff_b = ATTENTION_EFFICIENCY.get(attention, ATTENTION_EFFICIENCY["flash2"])

    # the score and value products contract over a head's width: narrower
    # heads run slower (efficiencies are given at 128)
    head = min(s.head_dim + s.rope_head_dim, s.v_head_dim)
    shape = (1.0 + ATTENTION_HALF_HEAD / max(1, head)) / (1.0 + ATTENTION_HALF_HEAD / 128.0)

    def attention_s(keys: float) -> Tuple[float, float]:
        """(the products' seconds, the exponentials') of one layer's forward"""
        return (attn_core * keys * shape / (bf16_peak * eff_f * fit.clock(gpu)),
                exps * keys / exp_rate if exp_rate else 0.0)

    mm_full, ex_full = attention_s(kv_len)
    if s.window and s.window_layers:
        mm_win, ex_win = attention_s(min(s.window, kv_len))
        share = s.window_layers / s.layers
        attn_mm = (1 - share) * mm_full + share * mm_win
        attn_ex = (1 - share) * ex_full + share * ex_win
    else:
        attn_mm, attn_ex = mm_full, ex_full
    # fused kernels (FlashAttention-3's class) run the exponentials beside
    # the products (warp specialisation, ping-pong): the slower of the two;
    # FlashAttention-2's one after the other
    fused = attention == "fused"
    attn = max(attn_mm, attn_ex) if fused else attn_mm + attn_ex
    back_mm = ATTENTION_BACKWARD * attn_mm * eff_f / eff_b
    back = max(back_mm, attn_ex) if fused else back_mm + attn_ex
    # attention's backward over twice its forward (the rest's backward)
    attn_extra = back - 2.0 * attn
    mm = s.mlp_matrices
    dense_mlp = gemm(T, mm * s.ffn / tp, h)
    dense_el = fit.elementwise_passes / 3.0 * 2.0 * T / tp * (h + s.ffn) / hbm
    if eager:
        dense_el += T / tp * eager_bytes(s, s.ffn) / hbm
    moe_gemm = moe_el = moe_perm = 0.0
    if s.is_moe:
        m_e = T * s.top_k * ep * etp / (s.experts * tp)
        local = s.experts / ep  # local experts, each its own GEMM
        moe_gemm = local * gemm(m_e, mm * s.expert_ffn / etp, h)
        if s.shared_experts:
            moe_gemm += gemm(T, mm * s.shared_experts * s.expert_ffn / tp, h)
        moe_gemm += gemm(T, s.experts / tp, h, "bf16")  # the router
        width = (s.top_k + s.shared_experts) * s.expert_ffn
        moe_el = fit.elementwise_passes / 3.0 * 2.0 * T / tp * (h + width) / hbm
        if eager:
            moe_el += T / tp * eager_bytes(s, width) / hbm
        moe_perm = fit.moe_passes / 3.0 * 2.0 * T / tp * s.top_k * h / hbm
    stage_layers = math.ceil(s.layers / pp)
    # the slowest stage holds the most MoE layers (the dense ones lead;
    # interleaved, every moe_every-th)
    stage_moe = s.moe_layers_in(stage_layers)
    stage_dense = stage_layers - stage_moe
    parts: Dict[str, float] = {
        "gemm": stage_layers * attn_proj + stage_dense * dense_mlp,
        "expert_gemm": stage_moe * moe_gemm,
        "attention": stage_layers * attn,
        "elementwise": stage_dense * dense_el + stage_moe * moe_el,
        "moe": stage_moe * moe_perm,
        "logits": gemm(T, s.vocab / tp, h, "bf16") + 3.0 * T * s.vocab / tp * 4 / hbm / 3.0,
    }
    forward = sum(parts.values())
    layer_fwd = forward - parts["logits"]
    if s.recompute == "full":
        # every layer, or Megatron-LM's block method's share of them
        vp = max(1, dims.vp, s.virtual_stages)
        recompute = layer_fwd * s.recomputed_layers(stage_layers, vp) / stage_layers
    elif s.recompute == "selective" and selective == "attention":
        # Megatron-LM's named modules, each forward again
        mods = set(s.recompute_modules.split("+")) if s.recompute_modules else {"core_attn"}
        per_dense = per_moe = 0.0
        if "core_attn" in mods:
            per_dense += attn
            per_moe += attn
        if "layernorm" in mods:
            # the norms kept apart from their GEMMs (a MoE layer's pre-MLP
            # one, MLA's input one), each read and written
            norm = 2 * 2.0 * T / tp * h / hbm
            per_dense += norm if s.kv_lora_rank else 0.0
            per_moe += norm * (2 if s.kv_lora_rank else 1) if s.is_moe else 0.0
        if "mla_up_proj" in mods and s.kv_lora_rank:
            up = (gemm(T, s.heads * (s.head_dim + s.rope_head_dim) / tp,
                       s.q_lora_rank or h)
                  + gemm(T, s.heads * (s.head_dim + s.v_head_dim) / tp, s.kv_lora_rank))
            per_dense += up
            per_moe += up
        if "mlp" in mods:
            per_dense += dense_mlp + dense_el
        if s.is_moe and "moe" in mods:
            per_moe += moe_gemm + moe_el + moe_perm
        else:
            if s.is_moe and "moe_act" in mods:
                # the experts' activation: their up outputs read, one written
                per_moe += 2.0 * T * s.top_k / tp * s.expert_ffn * mm / hbm
            if s.is_moe and "shared_experts" in mods and s.shared_experts:
                per_moe += gemm(T, mm * s.shared_experts * s.expert_ffn / tp, h)
        recompute = stage_dense * per_dense + stage_moe * per_moe
    elif s.recompute == "selective":
        recompute = parts["attention"] + parts["elementwise"]
    else:
        recompute = 0.0
    extra = stage_layers * attn_extra
    totals = {k: 3.0 * v for k, v in parts.items()}
    totals["attention"] += extra
    return StageCompute(forward, 2.0 * forward + extra, recompute, tuple(totals.items()),
                        stage_layers, dt, eager and eager_bytes(s, s.ffn) > 0)


def optimizer_seconds(params_local: float, gpu: GpuFigures) -> float:
    """The optimizer step on a rank that updates ``params_local``
    parameters: Adam in fp32 reads the master weight, gradient and two
    moments and writes three of them back plus the bf16 weight (30 bytes a
    parameter), memory-bound."""
    return params_local * 30.0 / (gpu.hbm_gbps * 1e9)


def placement_gpu(inv, placement, table=()) -> Tuple[GpuFigures, List[str]]:
    """The GPU a step runs at: the slowest (lowest bf16 peak) of the GPUs of
    the placement's hosts, with notes for a GPU no preset or inventory
    entry describes and for mixed GPU models."""
    notes: List[str] = []
    seen: Dict[str, GpuFigures] = {}
    for host in placement.hosts:
        node = inv.nodes.get(host)
        if node is None or not node.hardware.gpus:
            continue
        g = node.hardware.gpus[0]
        if g.model in seen:
            continue
        figs, known = gpu_figures(g.model, g.memory_mib, table)
        if not known:
            notes.append(f"GPU {g.model!r} has no compute figures (cost: gpu_compute: in the "
                         "inventory); priced as an H100")
        seen[g.model] = figs
    if not seen:
        figs, _ = gpu_figures("", None, table)
        return figs, ["no GPU model known; priced as an H100"]
    slowest = min(seen.values(), key=lambda f: f.peak("bf16")[0])
    if len(seen) > 1:
        notes.append(f"GPUs of {len(seen)} models; the step is priced at the slowest, "
                     f"{slowest.name}")
    return slowest, notes
