"""The queueing a capture's shaped links put on its own messages, re-run on the capture's own send times.

``ddlsim capture --bandwidth R`` gives every host a full-duplex link: a ``tbf`` qdisc of rate R and a token bucket
of ``default_burst_bytes(R)`` on what the host sends (its up link) and another on what it receives (its down link,
the bridge's egress; :mod:`ddlsim.capture.shaping`). Where that link binds (a worker's bytes per iteration exceed
the bucket), each captured message's transport time holds its wait in those queues as well as what the machine
took (the RPC stack, the kernel, the waits for a core). :func:`tbf_transit` takes the link's part out: it passes
the captured messages, at their captured send times, through their routes' token buckets and gives the time each
one would have taken on the links alone. A captured time less that is what the machine took, which a replay at a
link that does not bind carries (docs/validation.md, "PS from a link that bound").

The model is fluid, as the engine's flow fidelity is:

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

from collections import deque

import numpy as np


def tbf_transit(sent_ns: np.ndarray, sender: np.ndarray, receiver: np.ndarray, wire_bytes: np.ndarray,
                rate_bps: float, bucket_bytes: float) -> np.ndarray:
    """Each message's time on its links (ns, float: its delivery through its sender's up link and its receiver's
    down link less its send time), per the module's model; messages sent at the same time are taken in the order
    given. `wire_bytes`: what each message puts on the wire (headers included). Raises ValueError for a rate or
    bucket that is not above 0, a negative size, a message to its own sender, or arrays of different lengths."""
    sent, src, dst, size = (np.asarray(a) for a in (sent_ns, sender, receiver, wire_bytes))
    if not (len(sent) == len(src) == len(dst) == len(size)):
        raise ValueError("tbf_transit: sent_ns, sender, receiver and wire_bytes differ in length")
    if not (rate_bps > 0 and bucket_bytes > 0):
        raise ValueError(f"tbf_transit: rate {rate_bps} bit/s and bucket {bucket_bytes} bytes must be above 0")
    if not len(sent):
        return np.zeros(0)
    if float(np.min(size)) < 0 or bool(np.any(src == dst)):
        raise ValueError("tbf_transit: a message has a negative size or goes to its own sender")
    per_ns, bucket = rate_bps / 8e9, float(bucket_bytes)
    at = (sent - np.min(sent)).astype(float)  # from the first send: float ns keep their precision there
    order = np.argsort(at, kind="stable")
    out = np.full(len(at), np.nan)
    tokens: dict[tuple[int, int], float] = {}  # (host, 0 up / 1 down) -> bytes in its bucket
    queues: dict[tuple[int, int], deque] = {}  # connection (sender, receiver) -> [message, bytes left], in order
    k, now = 0, 0.0

    def advance(pair: tuple[int, int]) -> None:
        """The connection's head message starts: its burst passes at once, and while that delivers it whole, the
        next one starts; a connection left without messages is idle (removed)."""
        q = queues[pair]
        while q:
            i = q[0][0]
            links = ((pair[0], 0), (pair[1], 1))
            burst = min(min(tokens.setdefault(link, bucket) for link in links), float(size[i]))
            for link in links:
                tokens[link] -= burst
            if float(size[i]) - burst > 0:
                q[0][1] = float(size[i]) - burst
                return
            out[q.popleft()[0]] = now
        del queues[pair]

    while k < len(order) or queues:
        rates = _max_min(list(queues), per_ns)
        arrival = at[order[k]] if k < len(order) else np.inf
        finish = {pair: now + q[0][1] / rates[pair] for pair, q in queues.items()}
        first = min(finish, key=finish.__getitem__) if finish else None
        step = max(0.0, min(arrival, np.inf if first is None else finish[first]) - now)
        carried: dict[tuple[int, int], float] = {}
        for pair, q in queues.items():
            q[0][1] = 0.0 if pair == first and finish[first] <= arrival else q[0][1] - rates[pair] * step
            for link in ((pair[0], 0), (pair[1], 1)):
                carried[link] = carried.get(link, 0.0) + rates[pair]
        for link in tokens:
            tokens[link] = min(bucket, tokens[link] + max(0.0, per_ns - carried.get(link, 0.0)) * step)
        now += step
        for pair in list(queues):  # deliveries, each starting the connection's next message
            q = queues[pair]
            if q[0][1] <= 1e-3:  # a thousandth of a byte: float rounding, not a byte left
                out[q.popleft()[0]] = now
                advance(pair)
        while k < len(order) and at[order[k]] <= now:  # arrivals
            i = int(order[k])
            k += 1
            pair = (int(src[i]), int(dst[i]))
            idle = pair not in queues
            queues.setdefault(pair, deque()).append([i, float(size[i])])
            if idle:
                advance(pair)
    return out - at


def _max_min(pairs: list[tuple[int, int]], capacity: float) -> dict[tuple[int, int], float]:
    """Max-min fair rates (bytes/ns) of connections `pairs`, each over its sender's up link and its receiver's down
    link, every link of `capacity` (progressive filling: the most loaded link fixes its connections' share)."""
    rates: dict[tuple[int, int], float] = {}
    left = set(pairs)
    room: dict[tuple[int, int], float] = {}
    while left:
        users: dict[tuple[int, int], int] = {}
        for s, d in left:
            for link in ((s, 0), (d, 1)):
                users[link] = users.get(link, 0) + 1
                room.setdefault(link, capacity)
        share = min(room[link] / n for link, n in users.items())
        full = {link for link, n in users.items() if room[link] / n <= share * (1 + 1e-12)}
        fixed = {p for p in left if (p[0], 0) in full or (p[1], 1) in full}
        for s, d in fixed:
            rates[(s, d)] = share
            room[(s, 0)] -= share
            room[(d, 1)] -= share
        left -= fixed
    return rates
