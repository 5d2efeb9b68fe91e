"""The built-in models and their synthetic data, built in-house (no torchvision).

- ``mlp``: 41 ``Linear`` layers (256 wide, 256 input features) with ReLU, Kaiming-normal
  init so the signal survives the depth. Launch-bound by design: about 300 kernels of a few
  microseconds each per training step. The 256 width is the layer of the reference MLPs
  (``shared/nsys-samples``: ``Linear(256, 256)``, batch 32); at 512 the fp32 GEMMs take
  about 25% longer on an H200 while eager stays host-bound, so graphs gain less (measured:
  docs/runners.md).
- ``resnet18``: the CIFAR-10 ResNet-18 (3x3 stem, no max-pool, BasicBlocks [2, 2, 2, 2],
  widths 64-512, 32x32 inputs, 10 classes; 11,173,962 parameters).
- ``transformer``: a 6-layer post-norm Transformer encoder, d_model 512, 8 heads, FFN 2048,
  dropout 0.1, over sequences of 128 feature vectors (64 features per position, projected
  to d_model, plus a learned position embedding), mean-pooled into a 10-class head. The
  input is continuous rather than token ids so that no embedding backward (sort-based,
  with host syncs in some PyTorch versions) sits inside the captured step.

``size="tiny"`` keeps each architecture but shrinks widths, depth and inputs for fast tests.
Weights are initialised on the CPU from the caller's seed, so a model is bit-identical
whichever device it then moves to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cgprof.errors import RunnerError

NUM_CLASSES = 10
#: Width of the full-size MLP's hidden layers (and of its inputs).
MLP_WIDTH = 256


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of one built-in model: ``sample_shape`` is one sample's input shape.

    ``convolutional``: the model is a conv net, which the runners can lay out channels-last
    (NHWC) on CUDA (see ``RunConfig.channels_last``).
    """

    name: str
    size: str
    sample_shape: tuple[int, ...]
    num_classes: int = NUM_CLASSES
    convolutional: bool = False


_SPECS: dict[tuple[str, str], ModelSpec] = {
    ("mlp", "full"): ModelSpec("mlp", "full", (MLP_WIDTH,)),
    ("mlp", "tiny"): ModelSpec("mlp", "tiny", (16,)),
    ("resnet18", "full"): ModelSpec("resnet18", "full", (3, 32, 32), convolutional=True),
    ("resnet18", "tiny"): ModelSpec("resnet18", "tiny", (3, 16, 16), convolutional=True),
    ("transformer", "full"): ModelSpec("transformer", "full", (128, 64)),
    ("transformer", "tiny"): ModelSpec("transformer", "tiny", (8, 8)),
}


def spec(name: str, size: str = "full") -> ModelSpec:
    """The :class:`ModelSpec` of built-in model ``name`` at ``size``."""
    try:
        return _SPECS[(name, size)]
    except KeyError:
        raise RunnerError(f"unknown model {name!r} or size {size!r}") from None


class MLP(nn.Module):
    """``depth`` Linear layers, ReLU between them, the last one mapping to ``classes``."""

    def __init__(self, in_features: int, hidden: int, depth: int, classes: int) -> None:
        super().__init__()
        if depth < 2:
            raise ValueError("an MLP needs at least 2 Linear layers")
        widths = [in_features] + [hidden] * (depth - 1)
        layers: list[nn.Module] = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
            linear = nn.Linear(fan_in, fan_out)
            nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
            nn.init.zeros_(linear.bias)
            layers += [linear, nn.ReLU()]
        layers.append(nn.Linear(hidden, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN-ReLU layers with an identity (or 1x1 conv) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18: 3x3 stem, four stages of two BasicBlocks, global average pool."""

    def __init__(self, width: int = 64, classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        stages: list[nn.Module] = []
        cin = width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


class TransformerClassifier(nn.Module):
    """Linear input projection + learned positions -> TransformerEncoder -> mean pool -> head."""

    def __init__(
        self,
        features: int,
        seq: int,
        d_model: int,
        heads: int,
        ffn: int,
        layers: int,
        classes: int = NUM_CLASSES,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(features, d_model)
        self.pos = nn.Parameter(torch.randn(1, seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) + self.pos[:, : x.shape[1]]
        h = self.encoder(h)
        return self.head(self.norm(h.mean(dim=1)))


def build_model(name: str, size: str = "full", *, seed: int = 0) -> nn.Module:
    """Build model ``name`` on the CPU with weights drawn from ``seed`` (move it yourself)."""
    spec(name, size)  # validates
    tiny = size == "tiny"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "mlp":
            in_features = spec(name, size).sample_shape[0]
            return MLP(in_features, 16 if tiny else MLP_WIDTH, 4 if tiny else 41, NUM_CLASSES)
        if name == "resnet18":
            return ResNet18(width=4 if tiny else 64)
        seq, features = spec(name, size).sample_shape
        if tiny:
            return TransformerClassifier(features, seq, 16, 2, 32, 2)
        return TransformerClassifier(features, seq, 512, 8, 2048, 6)


def make_batches(
    model_spec: ModelSpec,
    batch: int,
    count: int,
    *,
    seed: int,
    device: torch.device | str,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` synthetic (inputs, class targets) batches, drawn on the CPU from ``seed``.

    Inputs are standard normal float32 of shape ``(batch, *sample_shape)`` in
    ``memory_format`` (``torch.channels_last`` for NHWC images); targets are int64 class
    indices. The same seed gives the same data on every device and in every layout.
    """
    gen = torch.Generator().manual_seed(seed + 1)
    out = []
    for _ in range(count):
        x = torch.randn((batch, *model_spec.sample_shape), generator=gen)
        y = torch.randint(0, model_spec.num_classes, (batch,), generator=gen)
        out.append((x.to(device).contiguous(memory_format=memory_format), y.to(device)))
    return out


def make_optimizer(
    name: str, params: list[nn.Parameter], *, capturable: bool, fused: bool = False
) -> torch.optim.Optimizer:
    """SGD (lr 0.01, momentum 0.9) or AdamW (lr 1e-4, weight decay 0.01).

    ``capturable=True`` asks AdamW to keep its step counter on the device, which graph
    capture needs (a host-side counter would be frozen into the graph). SGD has no such
    state and is capturable as it is.

    ``fused=True`` (CUDA only) updates every parameter in one pass of PyTorch's fused
    kernel (``torch._fused_sgd_`` / ``torch._fused_adamw_``) instead of the default
    ``foreach`` implementation's chain of list kernels, each of which reads and writes all
    parameters again (for the 41-layer MLP's 10.5M parameters, foreach SGD with momentum
    ran five such kernels per step, 134 us of an H200's time). The fused AdamW kernel
    also computes its bias corrections on the device whether or not ``capturable`` is set,
    so eager (``capturable=False``) and graphed (``capturable=True``) runs do the same
    arithmetic.
    """
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, fused=fused or None)
    if name == "adamw":
        return torch.optim.AdamW(
            params, lr=1e-4, weight_decay=0.01, capturable=capturable, fused=fused or None
        )
    raise RunnerError(f"unknown optimizer {name!r} (choose from sgd, adamw)")
