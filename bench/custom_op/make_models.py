#!/usr/bin/env python3
"""The custom-op acceptance model of issue 31 (docs/dsl.md): an EfficientNet-style network
(MBConv blocks: 1x1 expand, 3x3 depthwise, squeeze-excite, 1x1 project, residual; BatchNorm
after each convolution) exported with PyTorch twice:

  custom.onnx   every activation a custom-domain op my.ops::PSwish(x; beta) = x * sigmoid(beta x),
                which Kiln knows only from a plugin (tests/tools/custom_ops/test_plugin.cc);
  builtin.onnx  the same weights with SiLU, x * sigmoid(x): a built-in activation of equal cost
                (the same formula with beta = 1).

Also writes the input (input.npy) and PyTorch's outputs (custom_ref.npy, builtin_ref.npy).

usage: make_models.py OUT_DIR [--size 224] [--beta 1.5]
"""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn


class PSwishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def symbolic(g, x, beta):
        y = g.op("my.ops::PSwish", x, beta_f=beta)
        y.setType(x.type())
        return y


class PSwish(nn.Module):
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def forward(self, x):
        return PSwishFn.apply(x, self.beta)


def conv_bn(cin, cout, k, stride, groups, act):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, c, reduced, act):
        super().__init__()
        self.reduce = nn.Conv2d(c, reduced, 1)
        self.act = act()
        self.expand = nn.Conv2d(reduced, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(self.act(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin, cout, stride, expand, act):
        super().__init__()
        mid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(
            conv_bn(cin, mid, 1, 1, 1, act),
            conv_bn(mid, mid, 3, stride, mid, act),
            SqueezeExcite(mid, max(8, cin // 4), act),
            conv_bn(mid, cout, 1, 1, 1, None))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class Net(nn.Module):
    # (out channels, stride, expansion) per block, after a 3x3 stem of 24 channels.
    BLOCKS = [(24, 1, 1), (32, 2, 4), (32, 1, 4), (48, 2, 4), (48, 1, 4), (96, 2, 4), (96, 1, 4), (112, 1, 4),
              (160, 2, 4), (160, 1, 4)]

    def __init__(self, act):
        super().__init__()
        layers = [conv_bn(3, 24, 3, 2, 1, act)]
        c = 24
        for cout, stride, e in self.BLOCKS:
            layers.append(MBConv(c, cout, stride, e, act))
            c = cout
        layers.append(conv_bn(c, 640, 1, 1, 1, act))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(640, 1000)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def randomise_bn(net, gen):
    # Trained-looking BatchNorm statistics, so that folding them is not a no-op.
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def export(net, x, path):
    torch.onnx.export(net, x, path, input_names=["x"], output_names=["y"], opset_version=17,
                      custom_opsets={"my.ops": 1}, do_constant_folding=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--beta", type=float, default=1.5)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(31)
    gen = torch.Generator().manual_seed(31)
    custom = Net(lambda: PSwish(a.beta))
    randomise_bn(custom, gen)
    builtin = Net(nn.SiLU)
    builtin.load_state_dict(custom.state_dict())
    custom.eval()
    builtin.eval()
    x = torch.randn(1, 3, a.size, a.size, generator=gen)
    np.save(os.path.join(a.out, "input.npy"), x.numpy())
    with torch.no_grad():
        for name, net in (("custom", custom), ("builtin", builtin)):
            np.save(os.path.join(a.out, name + "_ref.npy"), net(x).numpy())
            export(net, x, os.path.join(a.out, name + ".onnx"))
    print(f"wrote custom.onnx, builtin.onnx, input.npy and PyTorch's outputs to {a.out}")


if __name__ == "__main__":
    main()
