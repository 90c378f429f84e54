"""The models of the parameter-server capture and how their parameters are
cut into PS keys and placed on servers.

* ``lenet5``: the zoo's LeNet-5 (conv1, conv2, fc1, fc2, fc3); one key per
  parameter tensor, in ``named_parameters`` order (the simulator's tensor ids).
* ``sparse-lr``: an embedding table (``vocab`` x ``embedding_dim``) feeding a
  logistic regression, the RPC paper's sparse setting. Every embedding row is
  a key (0..vocab-1); the dense regression vector (weights and bias) is cut
  into one slice per server (keys vocab..vocab+servers-1), as PS systems cut
  large tensors. A batch has ``features`` ids per example drawn from a Zipf
  law (exponent ``zipf_s``) over a seeded permutation of the vocabulary, so
  only the touched rows are pushed and pulled.

Both sides build the same initial parameters from the seed, so no initial
pull is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .lenet import LeNet5


@dataclass(frozen=True)
class Key:
    key: int
    name: str
    layer: int
    shape: tuple[int, ...]
    server: int  # index among the servers, 0..S-1

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * 4  # float32


LAYERS = ("conv1", "conv2", "fc1", "fc2", "fc3")


def place(sizes: list[int], servers: int, placement: str) -> list[int]:
    """Server index of each key: ``round-robin`` by key order or
    ``size-balanced`` (largest first onto the least loaded server)."""
    if placement == "round-robin":
        return [i % servers for i in range(len(sizes))]
    load = [0] * servers
    where = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(servers), key=lambda s: (load[s], s))
        where[i] = s
        load[s] += sizes[i]
    return where


class PsModel:
    """Parameters by key, gradients by key, batches; the same on every rank."""

    def __init__(self, config: dict):
        self.config = config
        self.kind = config["model"]
        torch.manual_seed(int(config["seed"]))
        servers = int(config["servers"])
        if self.kind == "lenet5":
            self.net = LeNet5()
            named = list(self.net.named_parameters())
            self.params = [p for _, p in named]
            sizes = [p.numel() * 4 for p in self.params]
            where = place(sizes, servers, config["placement"])
            self.keys = [Key(i, name, LAYERS.index(name.split(".")[0]), tuple(p.shape), where[i])
                         for i, (name, p) in enumerate(named)]
        else:
            vocab, dim = int(config["vocab"]), int(config["embedding_dim"])
            self.table = torch.randn(vocab, dim) * 0.1
            self.theta = torch.zeros(dim + 1)  # regression weights, then the bias
            self.slices = np.array_split(np.arange(dim + 1), servers)
            rows = place([dim * 4] * vocab, servers, config["placement"])
            self.keys = [Key(k, f"emb[{k}]", 0, (dim,), rows[k]) for k in range(vocab)]
            self.keys += [Key(vocab + j, f"lr[{j}]", 1, (len(s),), j) for j, s in enumerate(self.slices)]
            self.permutation = np.random.default_rng(int(config["seed"])).permutation(vocab)

    def value(self, key: int) -> torch.Tensor:
        """The current value of a key (a view on the parameters)."""
        if self.kind == "lenet5":
            return self.params[key].data
        vocab = int(self.config["vocab"])
        if key < vocab:
            return self.table[key]
        return self.theta[torch.as_tensor(self.slices[key - vocab])]

    def assign(self, key: int, value: torch.Tensor) -> None:
        if self.kind == "lenet5":
            self.params[key].data.copy_(value)
            return
        vocab = int(self.config["vocab"])
        if key < vocab:
            self.table[key].copy_(value)
        else:
            self.theta[torch.as_tensor(self.slices[key - vocab])] = value

    def batch(self, worker: int, iteration: int):
        """Seeded synthetic batch of one worker and iteration."""
        rng = np.random.default_rng([int(self.config["seed"]), worker, iteration])
        b = int(self.config["batch_size"])
        if self.kind == "lenet5":
            x = torch.from_numpy(rng.standard_normal((b, 1, 32, 32), dtype=np.float32))
            y = torch.from_numpy(rng.integers(0, 10, b))
            return x, y
        ids = zipf_ids(rng, int(self.config["vocab"]), float(self.config["zipf_s"]), (b, int(self.config["features"])))
        y = torch.from_numpy(rng.integers(0, 2, b).astype(np.float32))
        return torch.from_numpy(self.permutation[ids]), y

    def forward(self, batch):
        """The loss of one batch (and what backward needs)."""
        if self.kind == "lenet5":
            x, y = batch
            self.net.zero_grad()
            return (nn.functional.cross_entropy(self.net(x), y),)
        ids, y = batch
        touched, inverse = torch.unique(ids, return_inverse=True)
        rows = self.table[touched].clone().requires_grad_(True)
        theta = self.theta.clone().requires_grad_(True)
        logit = rows[inverse].sum(dim=1) @ theta[:-1] + theta[-1]
        return nn.functional.binary_cross_entropy_with_logits(logit, y), touched, rows, theta

    def backward(self, state) -> dict[int, torch.Tensor]:
        """The gradient of every key the batch touched."""
        state[0].backward()
        if self.kind == "lenet5":
            return {k.key: p.grad.detach().clone() for k, p in zip(self.keys, self.params)}
        _, touched, rows, theta = state
        grads = {int(k): g for k, g in zip(touched.tolist(), rows.grad)}
        vocab = int(self.config["vocab"])
        for j, s in enumerate(self.slices):
            grads[vocab + j] = theta.grad[torch.as_tensor(s)].clone()
        return grads


def zipf_ids(rng: np.random.Generator, vocab: int, s: float, shape) -> np.ndarray:
    """Zipf ranks 0..vocab-1 with P(rank r) proportional to (r + 1) ** -s."""
    p = np.arange(1, vocab + 1, dtype=np.float64) ** -s
    return rng.choice(vocab, size=shape, p=p / p.sum())
