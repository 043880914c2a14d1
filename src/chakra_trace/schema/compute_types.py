"""The peak each compute node runs at on a device: its element type's, so that a roofline (the
analysis, `analyze.roofline`, and the simulator's compute model, `simulate.costs`) costs FP32
work at the FP32 peak and BF16 work at the BF16 one.

A node's type is its ``dtype`` attribute (written by `chakra convert pytorch` from the op's first
floating input, `convert.dtypes`); `DeviceSpec.peak_for` gives its peak, a wider type's where the
datasheet gives none (counted: ``fallback``), the device's ``default_dtype`` peak where the node
has no type (counted: ``known`` False).

TF32 is not a tensor type but a math mode of FP32 matrix multiplies and convolutions on tensor
cores, a global switch the trace does not record. ``fp32_as`` says which FP32 ops run as TF32 on
a device with a TF32 peak:

- ``"pytorch"`` (the default): PyTorch's defaults, per the PyTorch CUDA notes, "TensorFloat-32
  (TF32) on Ampere (and later) devices"
  (https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices):
  ``torch.backends.cudnn.allow_tf32`` is True, so FP32 convolutions run as TF32 where cuDNN
  does (`DeviceSpec.tf32_conv`: NVIDIA Ampere and later; on ROCm TF32 is opt-in); and
  ``torch.backends.cuda.matmul.allow_tf32`` is False since PyTorch 1.12, so FP32 matmuls run
  as FP32 (a job recorded with PyTorch 1.7-1.11, or with
  ``torch.set_float32_matmul_precision("high")``, ran them as TF32: say ``"tf32"``);
- ``"tf32"``: FP32 matmuls and convolutions (and attention) as TF32 wherever the device has a
  TF32 peak;
- ``"fp32"``: every FP32 op at the FP32 peak (``NVIDIA_TF32_OVERRIDE=0``).

Other FP32 ops (elementwise, normalizations) never use TF32. A backward node is of the class of
the op it differentiates (``ConvolutionBackward0`` a convolution, ``AddmmBackward0`` a matmul).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import ChakraError
from .codec import extra_attr_strings
from .devices import _CANON, DeviceSpec
from .kernel_models import KernelModel
from .trace import Trace

__all__ = [
    "ATTENTION_OPS",
    "CONV_OPS",
    "FP32_AS",
    "MATMUL_OPS",
    "DeviceCompute",
    "NodePeaks",
    "fp32_as_rule",
    "node_peaks",
    "op_kind",
]

#: The ``fp32_as`` choices (module docstring); the first is the default.
FP32_AS = ("pytorch", "tf32", "fp32")

#: Matrix multiplies (cuBLAS: ``torch.backends.cuda.matmul.allow_tf32``).
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::matmul",
        "aten::addmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::addmv",
        "aten::mv",
        "aten::dot",
        "aten::vdot",
    }
)
#: Attention: batched matmuls (the math backend runs bmm), TF32 with the matmul switch.
ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_flash_attention_forward",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    }
)
#: Convolutions, forward (``CONV_FORWARD_OPS``) and backward (cuDNN: ``torch.backends.cudnn.allow_tf32``).
CONV_FORWARD_OPS = frozenset(
    {
        "aten::convolution",
        "aten::_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::cudnn_convolution",
        "aten::mkldnn_convolution",
        "aten::miopen_convolution",
        "aten::_convolution_mode",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::cudnn_convolution_transpose",
        "aten::_slow_conv2d_forward",
        "aten::thnn_conv2d",
        "aten::_nnpack_spatial_convolution",
    }
)
CONV_BACKWARD_OPS = frozenset(
    {
        "aten::convolution_backward",
        "aten::cudnn_convolution_backward",
        "aten::mkldnn_convolution_backward",
        "aten::_slow_conv2d_backward",
    }
)
CONV_OPS = CONV_FORWARD_OPS | CONV_BACKWARD_OPS

_OTHER, _MATMUL, _CONV = 0, 1, 2

#: Backward nodes (``autograd::engine::evaluate_function: ConvolutionBackward0``, or the autograd
#: node's own name): the class of the op whose gradient they compute (their FLOPs are its backward
#: op's, folded into them: `convert.dtypes`), by the autograd node's name.
_AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
_AUTOGRAD_CONV = re.compile(r"(Cudnn|Mkldnn|Miopen|Slow|Thnn)?Conv\w*Backward")
_AUTOGRAD_MATMUL = re.compile(r"(Mm|Addmm|Bmm|Baddbmm|Addbmm|Mv|Addmv|Dot|Vdot|ScaledMm|ScaledDotProduct\w*)Backward")


_AUTOGRAD_ATTENTION = re.compile(r"ScaledDotProduct\w*Backward")


def op_kind(name: str) -> str:
    """ "conv", "attention", "matmul" or "other": the kind of kernel an op (or the autograd node of
    its backward) runs, by name. Attention is a batched matmul (TF32 with the matmul switch) that
    a device model costs apart (`simulate.kernels`)."""
    if name in CONV_OPS:
        return "conv"
    if name in ATTENTION_OPS:
        return "attention"
    if name in MATMUL_OPS:
        return "matmul"
    node = name.removeprefix(_AUTOGRAD_PREFIX)
    if _AUTOGRAD_CONV.match(node):
        return "conv"
    if _AUTOGRAD_ATTENTION.match(node):
        return "attention"
    return "matmul" if _AUTOGRAD_MATMUL.match(node) else "other"


def _op_class(name: str) -> int:
    kind = op_kind(name)
    return _CONV if kind == "conv" else _MATMUL if kind in ("matmul", "attention") else _OTHER


def _check(fp32_as: str) -> str:
    if fp32_as not in FP32_AS:
        raise ChakraError(f"fp32_as must be one of {', '.join(FP32_AS)}, got {fp32_as!r}")
    return fp32_as


def fp32_as_rule(dev: DeviceSpec, fp32_as: str = "pytorch") -> str:
    """``fp32_as`` on ``dev`` in words: which FP32 ops it costs at the TF32 peak."""
    _check(fp32_as)
    if "tf32" not in dict(dev.peaks):
        return f"{fp32_as}: every FP32 op at the FP32 peak ({dev.name} has no TF32 peak)"
    if fp32_as == "tf32":
        return "tf32: FP32 matmuls, attention and convolutions at the TF32 peak"
    if fp32_as == "fp32":
        return "fp32: every FP32 op at the FP32 peak"
    if dev.tf32_conv:
        return "pytorch: FP32 convolutions at the TF32 peak (cudnn.allow_tf32), FP32 matmuls at FP32 (matmul.allow_tf32 off)"
    return "pytorch: every FP32 op at the FP32 peak (TF32 is opt-in on this device)"


def _effective(dtype: str, op: int, dev: DeviceSpec, fp32_as: str) -> str:
    """The type whose peak an op of type ``dtype`` and class ``op`` runs at (TF32 per ``fp32_as``)."""
    d = _CANON.get(dtype, dtype)
    if d != "fp32" or op == _OTHER or "tf32" not in dict(dev.peaks):
        return d
    if fp32_as == "tf32" or (fp32_as == "pytorch" and op == _CONV and dev.tf32_conv):
        return "tf32"
    return d


@dataclass(frozen=True)
class NodePeaks:
    """Per node of a trace: ``flops`` the peak (FLOP/s) it runs at, ``peak`` the type whose peak
    it is (``names[peak]``), ``known`` whether the node has a ``dtype`` (``dtypes[dtype]``, as
    recorded), ``fallback`` whether its type has no peak of its own on the device (a wider type's
    stands in), ``tf32`` whether FP32 work is costed as TF32."""

    flops: np.ndarray  # float64 FLOP/s
    peak: np.ndarray  # int64 codes into names
    names: list[str]
    known: np.ndarray  # bool
    fallback: np.ndarray  # bool
    tf32: np.ndarray  # bool
    dtype: np.ndarray  # int32 codes into dtypes, where known
    dtypes: list[str]


def node_peaks(t: Trace, dev: DeviceSpec, fp32_as: str = "pytorch") -> NodePeaks:
    """The peak of every node of ``t`` on ``dev`` (`NodePeaks`): the ``dtype`` attribute read once
    as an array, Python only per distinct (type, op class) pair. Computed once while the trace's
    attributes and names stay the same (ranks sharing a program share it: read-only)."""
    _check(fp32_as)
    try:
        key = ("node_peaks", dev, fp32_as)
        hash(key)
    except TypeError:
        return _node_peaks(t, dev, fp32_as)
    return t.cached(key, ("extra", "extra_indptr", "name_codes"), lambda: _node_peaks(t, dev, fp32_as))


def _node_peaks(t: Trace, dev: DeviceSpec, fp32_as: str) -> NodePeaks:
    n = len(t)
    codes, dnames, has = extra_attr_strings(t, "dtype")
    # op class only where it can matter: FP32 nodes, by distinct name code
    cls = np.zeros(n, np.int64)
    fp32 = [i for i, x in enumerate(dnames) if _CANON.get(x, x) == "fp32"]
    if fp32 and "tf32" in dict(dev.peaks) and fp32_as != "fp32":
        rows = np.flatnonzero(has & np.isin(codes, fp32))
        used = np.unique(t.name_codes[rows])
        table = np.zeros(int(used.max()) + 1 if used.size else 1, np.int64)
        for c in used.tolist():
            table[c] = _op_class(t.names[c])
        cls[rows] = table[t.name_codes[rows]]
    key = np.where(has, codes.astype(np.int64) * 3 + cls, -1)
    uniq, inv = np.unique(key, return_inverse=True)
    names: list[str] = []
    flops = np.empty(uniq.size, np.float64)
    peak = np.empty(uniq.size, np.int64)
    fallback = np.zeros(uniq.size, bool)
    tf32 = np.zeros(uniq.size, bool)
    own = dict(dev.peaks)
    for j, k in enumerate(uniq.tolist()):
        if k < 0:
            f, p = dev.peak_for(None)
        else:
            want = _effective(dnames[k // 3], k % 3, dev, fp32_as)
            f, p = dev.peak_for(want)
            fallback[j] = bool(own) and p != want
            tf32[j] = want == "tf32" and p == "tf32"
        if p not in names:
            names.append(p)
        flops[j], peak[j] = f, names.index(p)
    inv = inv.reshape(-1)
    return NodePeaks(flops[inv], peak[inv], names, has.copy(), fallback[inv], tf32[inv], codes, dnames)


@dataclass(frozen=True)
class DeviceCompute:
    """A device's per-type peaks times ``efficiency``, with the TF32 rule ``fp32_as``, and
    optionally its kernel model: what a system set from a device (`simulate.devices.with_device`)
    costs compute nodes by."""

    device: DeviceSpec
    efficiency: float = 1.0
    fp32_as: str = "pytorch"
    # the device's kernel model (`schema.kernel_models`): nodes cost as its kernels run them
    # (`simulate.kernels`) instead of at the roofline; None: the roofline
    kernels: KernelModel | None = None

    def __post_init__(self) -> None:
        _check(self.fp32_as)
        if not 0 < self.efficiency <= 1:
            raise ChakraError(f"device efficiency must be in (0, 1], got {self.efficiency}")

    @property
    def rule(self) -> str:
        """`fp32_as_rule` of this device."""
        return fp32_as_rule(self.device, self.fp32_as)

    def peak_tflops(self, p: NodePeaks) -> np.ndarray:
        """The nodes' peaks (`node_peaks`) in TFLOPS times the efficiency, computed as a
        one-peak system's ``peak-perf`` is (`with_device`), so that an untyped node costs
        exactly what it did with one peak."""
        return p.flops * self.efficiency / 1e12
