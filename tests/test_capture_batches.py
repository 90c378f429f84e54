"""The DDP capture's synthetic batches are made as the training loop takes them, not all before it (a capture of
100,000 iterations made 3.3 GB of ResNet batches per rank before its first iteration), and are the same batches
as the seeded generator gives when drawn one after another."""
import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from ddlsim.capture.ddp_models import synthetic_batches  # noqa: E402


def eager(model, batch, size, count, seed):
    """The oracle: the generator drawn by hand, batch after batch (images, then labels)."""
    g = torch.Generator().manual_seed(seed)
    channels, classes = (1, 10) if model == "lenet5" else (3, 1000)
    out = []
    for _ in range(count):
        x = torch.randn(batch, channels, size, size, generator=g)
        out.append((x, torch.randint(0, classes, (batch,), generator=g)))
    return out


@pytest.mark.parametrize("model,batch,size,count,seed", [("lenet5", 4, 32, 5, 0), ("resnet18", 2, 32, 3, 7)])
def test_the_batches_are_the_seeded_generators_in_order_on_every_pass(model, batch, size, count, seed):
    want = eager(model, batch, size, count, seed)
    batches = synthetic_batches(model, batch, size, count, seed)
    assert len(batches) == count
    for _ in range(2):  # a second pass gives the same batches
        got = list(batches)
        assert len(got) == count
        assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want))
    assert torch.equal(batches[-1][0], want[-1][0]) and torch.equal(batches[0][1], want[0][1])
    with pytest.raises(IndexError):
        batches[count]


def test_a_long_capture_makes_a_batch_only_when_the_loop_takes_it(monkeypatch):
    made = []
    real = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: made.append(1) or real(*a, **k))
    batches = synthetic_batches("lenet5", 1, 32, 100_000, 0)
    first = next(iter(batches))
    assert first[0].shape == (1, 1, 32, 32)
    assert len(made) == 1  # eagerly: 100,000 batches before the first iteration
