"""The queueing a capture's shaped links put on its own messages, re-run on the capture's own send times.

``ddlsim capture --bandwidth R`` gives every host a full-duplex link: a ``tbf`` qdisc of rate R and a token bucket
of ``default_burst_bytes(R)`` on what the host sends (its up link) and another on what it receives (its down link,
the bridge's egress; :mod:`ddlsim.capture.shaping`). Where that link binds (a worker's bytes per iteration exceed
the bucket), each captured message's transport time holds its wait in those queues as well as what the machine
took (the RPC stack, the kernel, the waits for a core). :func:`tbf_transit` takes the link's part out: it passes
the captured messages, at their captured send times, through their routes' token buckets and gives the time each
one would have taken on the links alone. A captured time less that is what the machine took, which a replay at a
link that does not bind carries (docs/validation.md, "PS from a link that bound").

The model (the engine's, ``crates/ddlsim-core/src/network/tbf_replay.rs``) is fluid, as the flow fidelity is:

- each (sender, receiver) pair is one connection (TensorPipe keeps one per pair) that sends its messages in order:
  a message starts when the pair's previous one is delivered;
- the connections share each link max-min fairly (tbf's FIFO interleaves their packets), a link of rate R;
- a message that starts on an idle connection passes at once as many bytes as both of its links' buckets hold (a
  burst at the veth's speed) and takes them from both buckets; a bucket refills at R less what its link carries,
  up to its size, and is full before the first message.

Why shared and not one queue per link, whole messages in send order: in a stored 100 Mbit/s PS capture
(docs/validation.md) two workers' 192 kB pushes, sent 6 ms apart, reached the server together, 30 ms after they
were sent; one queue per link would deliver the first 16 ms before the second."""

from __future__ import annotations

import numpy as np


def tbf_transit(sent_ns: np.ndarray, sender: np.ndarray, receiver: np.ndarray, wire_bytes: np.ndarray,
                rate_bps: float, bucket_bytes: float) -> np.ndarray:
    """Each message's time on its links (ns, float: its delivery through its sender's up link and its receiver's
    down link less its send time), per the module's model; messages sent at the same time are taken in the order
    given. `wire_bytes`: what each message puts on the wire (headers included). Raises ValueError (the engine's
    BadInputError) for a rate or bucket that is not above 0, a negative or non-finite size, a message to its own
    sender, or arrays of different lengths."""
    from .. import _core

    def ints(a: np.ndarray) -> list[int]:
        return np.asarray(a).astype(np.int64).tolist()

    return np.asarray(_core.tbf_transit(ints(sent_ns), ints(sender), ints(receiver),
                                        np.asarray(wire_bytes, dtype=float).tolist(), float(rate_bps),
                                        float(bucket_bytes)), dtype=float)
