"""A fake engine on real libzmq (pyzmq) for the service's interop test.

It binds a PUB socket and a ROUTER replay socket on 127.0.0.1 (free ports), prints one JSON line
`{"events": "tcp://...", "replay": "tcp://..."}`, then reads commands, one JSON object a line,
from standard input and answers each with one JSON line:

  {"op": "store", "hashes": [...], "parent": null|int, "tokens": [...], "block_size": 16,
   "send": true}                      -> publishes (or, with "send": false, only buffers) a batch
  {"op": "empty"}                     -> publishes a batch without events
  {"op": "blast", "batches": N, "blocks": 32, "block_size": 16, "first_hash": 1, "seed": 7}
                                      -> encodes N batches of one BlockStored each (a chain of
                                         N * blocks blocks, pseudo-random token ids), buffers
                                         them for replays and answers {"encoded": N}; then the
                                         next line (any) publishes them all at once, unpaced
                                         (the PUB queue is unbounded), and is answered
                                         {"sent": N, "seconds": ...} (the bench's ingest)
  {"op": "quit"}                      -> exits

Batches are vLLM's positional `KVEventBatch` (the structs of engine_fixtures.py), framed
`[topic, seq (8 bytes big-endian), payload]`; the ROUTER answers `[id, b"", start_seq]` with
`[id, b"", seq, payload]` per buffered batch from start_seq and the end marker
`[id, b"", -1, b""]`, as vLLM's publisher does. It exits by itself after 60 seconds.
"""

import json
import pathlib
import sys
import threading
import time

import msgspec
import zmq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from engine_fixtures import BlockStored, VllmEventBatch  # noqa: E402

DEADLINE = time.monotonic() + 60


def main():
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    # No high-water mark: a batch published faster than the subscriber reads waits in the
    # queue instead of being dropped (the bench's blast relies on it).
    publisher.setsockopt(zmq.SNDHWM, 0)
    events_port = publisher.bind_to_random_port("tcp://127.0.0.1")
    router = context.socket(zmq.ROUTER)
    replay_port = router.bind_to_random_port("tcp://127.0.0.1")
    buffer = []
    lock = threading.Lock()
    encoder = msgspec.msgpack.Encoder()

    def serve_replays():
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while time.monotonic() < DEADLINE:
            if not poller.poll(100):
                continue
            frames = router.recv_multipart()
            peer, start = frames[0], int.from_bytes(frames[-1], "big")
            with lock:
                kept = [(seq, payload) for seq, payload in buffer if seq >= start]
            for seq, payload in kept:
                router.send_multipart([peer, b"", seq.to_bytes(8, "big"), payload])
            router.send_multipart([peer, b"", (-1).to_bytes(8, "big", signed=True), b""])

    threading.Thread(target=serve_replays, daemon=True).start()
    print(json.dumps({"events": f"tcp://127.0.0.1:{events_port}",
                      "replay": f"tcp://127.0.0.1:{replay_port}"}), flush=True)

    for line in sys.stdin:
        if time.monotonic() > DEADLINE:
            break
        command = json.loads(line)
        if command["op"] == "quit":
            break
        if command["op"] == "blast":
            blast(command, encoder, publisher, buffer, lock)
            continue
        if command["op"] == "store":
            events = [BlockStored(command["hashes"], command.get("parent"), command["tokens"],
                                  command["block_size"], None, None, None)]
        else:
            events = []
        payload = encoder.encode(VllmEventBatch(time.time(), events, None))
        with lock:
            seq = len(buffer)
            buffer.append((seq, payload))
        if command.get("send", True):
            publisher.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        print(json.dumps({"seq": seq}), flush=True)
    context.destroy(linger=0)


def blast(command, encoder, publisher, buffer, lock):
    """Encodes a chain of batches, waits for one more input line, then publishes them all."""
    batches, blocks = command["batches"], command["blocks"]
    block_size, first = command["block_size"], command["first_hash"]
    state = command.get("seed", 7) or 1
    payloads = []
    for batch in range(batches):
        start = first + batch * blocks
        tokens = []
        for _ in range(blocks * block_size):
            # xorshift32: token ids in a Llama-3-sized vocabulary, as cheap as Python allows.
            state ^= (state << 13) & 0xFFFFFFFF
            state ^= state >> 17
            state ^= (state << 5) & 0xFFFFFFFF
            tokens.append(state % 128_256)
        event = BlockStored(list(range(start, start + blocks)),
                            start - 1 if batch > 0 else None, tokens, block_size,
                            None, None, None)
        payloads.append(encoder.encode(VllmEventBatch(time.time(), [event], None)))
    with lock:
        base = len(buffer)
        buffer.extend((base + index, payload) for index, payload in enumerate(payloads))
    print(json.dumps({"encoded": batches}), flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    for index, payload in enumerate(payloads):
        publisher.send_multipart([b"", (base + index).to_bytes(8, "big"), payload])
    print(json.dumps({"sent": batches, "seconds": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main()
