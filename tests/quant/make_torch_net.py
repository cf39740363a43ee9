#!/usr/bin/env python3
"""Exports a small convolutional net with PyTorch (Debian's python3-torch) for quantize_test.py.

Conv+BatchNorm+ReLU6 (exported as Clip), a depthwise conv, a residual Add, MaxPool,
AveragePool, Concat, GlobalAveragePool and a Linear: the op mix of a mobile classifier, with
the seeded random weights of an untrained net (BatchNorm statistics set to non-trivial values
so folding them matters).

Usage: make_torch_net.py OUT.onnx
"""
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU())
        self.pw = nn.Conv2d(8, 8, 1)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2)
        self.branch = nn.Conv2d(8, 4, 1)
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.pw(self.dw(x))
        x = self.pool(x)
        x = torch.cat([self.avg(x), self.avg(self.branch(x))], dim=1)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def main(out):
    torch.manual_seed(3)
    net = Net()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    net.eval()
    x = torch.randn(1, 3, 16, 16)
    torch.onnx.export(net, x, out, input_names=["x"], output_names=["y"], opset_version=13,
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


if __name__ == "__main__":
    main(sys.argv[1])
