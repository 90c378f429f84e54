"""The model of tests/test_plan_own_script.py's training script (imported there and by the script's ranks): nested
modules, so its parameters are named body.0.weight ... head.bias."""

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x))
