"""LeNet-5 (LeCun et al. 1998) as the zoo describes it: conv1, conv2, fc1,
fc2, fc3 on 1x32x32 inputs, 61,706 parameters; the one definition the DDP
and PS captures share (tools/gen_model_zoo.py generated the zoo table from
the same layers)."""

from __future__ import annotations

import torch
from torch import nn


class LeNet5(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.act = nn.Tanh()
        self.pool = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        x = self.act(self.fc1(torch.flatten(x, 1)))
        return self.fc3(self.act(self.fc2(x)))
