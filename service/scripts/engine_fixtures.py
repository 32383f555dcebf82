"""Writes the golden msgpack KV-event fixtures the service's decoder tests read.

The engines' event structs are declared here field for field, as vLLM and SGLang declare them
(msgspec, tagged, `array_like` for the positional layouts), so the bytes are what the engines
publish. Each fixture `NAME.msgpack` is one EventBatch; `NAME.expected.json` is what the router
must decode from it (block hashes as the unsigned 64-bit ids the router uses).

Run: python3 service/scripts/engine_fixtures.py service/tests/fixtures   (needs msgspec)
"""

import hashlib
import json
import pathlib
import sys
from typing import Any, Optional, Union

import msgspec

MASK = (1 << 64) - 1


# --- vLLM (vllm/distributed/kv_events.py), positional layout --------------------------------
class VllmEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class VllmKVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


ExternalBlockHash = Union[bytes, int]


class BlockStored(VllmKVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: Optional[ExternalBlockHash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]


class BlockRemoved(VllmKVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: Optional[str]


class AllBlocksCleared(VllmKVCacheEvent):
    pass


# --- vLLM with hybrid-model metadata (newer releases): the tail after extra_keys ------------
class HybridBlockStored(
    msgspec.Struct, array_like=True, omit_defaults=False, gc=False, tag="BlockStored"
):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: Optional[ExternalBlockHash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Any]]
    group_idx: Optional[int]
    kv_cache_spec_kind: Optional[str]
    kv_cache_spec_sliding_window: Optional[int]


class HybridBlockRemoved(
    msgspec.Struct, array_like=True, omit_defaults=False, gc=False, tag="BlockRemoved"
):
    block_hashes: list[ExternalBlockHash]
    medium: Optional[str]
    group_idx: Optional[int]
    kv_cache_spec_kind: Optional[str]
    kv_cache_spec_sliding_window: Optional[int]


# --- vLLM map layout (the same structs without array_like) ----------------------------------
class MapEventBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class MapBlockStored(msgspec.Struct, omit_defaults=True, gc=False, tag="BlockStored"):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: Optional[ExternalBlockHash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int] = None
    medium: Optional[str] = None
    lora_name: Optional[str] = None


class MapBlockRemoved(msgspec.Struct, omit_defaults=True, gc=False, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: Optional[str] = None


class MapAllBlocksCleared(msgspec.Struct, omit_defaults=True, gc=False, tag="AllBlocksCleared"):
    pass


# --- SGLang (python/sglang/srt/disaggregation/kv_events.py): the shorter positional layout ---
class SglangEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    attn_dp_rank: Optional[int] = None


class SglangKVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class SglangBlockStored(SglangKVCacheEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]


class SglangBlockRemoved(SglangKVCacheEvent, tag="BlockRemoved"):
    block_hashes: list[int]


class SglangAllBlocksCleared(SglangKVCacheEvent, tag="AllBlocksCleared"):
    pass


def router_id(value):
    """The 64-bit id the router must derive from a wire block hash."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return int.from_bytes(value[-8:], "big")
    return value & MASK


def tokens(n, salt):
    return [(t * 2654435761 ^ salt) & 0x7FFFFFFF for t in range(n)]


def expected_stored(hashes, parent, toks, block_size, lora_id=None, medium=None,
                    lora_name=None, cache_salt=None, group_idx=None, kind=None):
    return {"type": "BlockStored", "block_hashes": [router_id(h) for h in hashes],
            "parent_block_hash": router_id(parent), "token_ids": toks,
            "block_size": block_size, "lora_id": lora_id, "medium": medium,
            "lora_name": lora_name, "cache_salt": cache_salt, "group_idx": group_idx,
            "kv_cache_spec_kind": kind}


def expected_removed(hashes, medium=None, group_idx=None, kind=None):
    return {"type": "BlockRemoved", "block_hashes": [router_id(h) for h in hashes],
            "medium": medium, "group_idx": group_idx, "kv_cache_spec_kind": kind}


def fixtures():
    t0, t1, t2 = tokens(32, 1), tokens(16, 2), tokens(16, 3)
    out = {}

    events = [
        BlockStored([101, 102], None, t0, 16, 3, "GPU", "adapter-a"),
        BlockStored([103], 102, t1, 16, None, None, None),
        BlockStored([(1 << 64) - 5], 103, t2, 16, None, "CPU", None),
        BlockRemoved([101], None),
        BlockRemoved([(1 << 64) - 5], "CPU"),
        AllBlocksCleared(),
    ]
    expected = [
        expected_stored([101, 102], None, t0, 16, 3, "GPU", "adapter-a"),
        expected_stored([103], 102, t1, 16),
        expected_stored([(1 << 64) - 5], 103, t2, 16, medium="CPU"),
        expected_removed([101]),
        expected_removed([(1 << 64) - 5], "CPU"),
        {"type": "AllBlocksCleared"},
    ]
    out["vllm_array"] = (VllmEventBatch(1700000000.5, events, 1),
                         {"ts": 1700000000.5, "data_parallel_rank": 1, "events": expected})

    map_events = [
        MapBlockStored([101, 102], None, t0, 16, lora_id=3, medium="GPU", lora_name="adapter-a"),
        MapBlockStored([103], 102, t1, 16),
        MapBlockRemoved([101]),
        MapAllBlocksCleared(),
    ]
    map_expected = [expected[0], expected[1], expected[3], {"type": "AllBlocksCleared"}]
    out["vllm_map"] = (MapEventBatch(1700000001.0, map_events, 2),
                       {"ts": 1700000001.0, "data_parallel_rank": 2, "events": map_expected})

    digests = [hashlib.sha256(f"block-{i}".encode()).digest() for i in range(3)]
    out["vllm_bytes"] = (
        VllmEventBatch(1700000002.0, [
            BlockStored(digests[:2], None, t0, 16, None, None, None),
            BlockStored([digests[2]], digests[1], t1, 16, None, None, None),
            BlockRemoved([digests[0]], None),
        ]),
        {"ts": 1700000002.0, "data_parallel_rank": None, "events": [
            expected_stored(digests[:2], None, t0, 16),
            expected_stored([digests[2]], digests[1], t1, 16),
            expected_removed([digests[0]]),
        ]},
    )

    out["vllm_hybrid"] = (
        VllmEventBatch(1700000003.0, [
            HybridBlockStored([201], None, t1, 16, None, None, None, None, 0,
                              "full_attention", None),
            HybridBlockStored([301], None, t1, 16, None, None, None, None, 1,
                              "sliding_window", 128),
            HybridBlockRemoved([301], None, 1, "sliding_window", 128),
        ], 0),
        {"ts": 1700000003.0, "data_parallel_rank": 0, "events": [
            expected_stored([201], None, t1, 16, group_idx=0, kind="full_attention"),
            expected_stored([301], None, t1, 16, group_idx=1, kind="sliding_window"),
            expected_removed([301], group_idx=1, kind="sliding_window"),
        ]},
    )

    out["sglang"] = (
        SglangEventBatch(1700000004.25, [
            SglangBlockStored([-7, 8], None, t0, 16, None),
            SglangBlockStored([-9], 8, t1, 16, 5),
            SglangBlockRemoved([-7]),
            SglangAllBlocksCleared(),
        ]),
        {"ts": 1700000004.25, "data_parallel_rank": None, "events": [
            expected_stored([-7, 8], None, t0, 16),
            expected_stored([-9], 8, t1, 16, lora_id=5),
            expected_removed([-7]),
            {"type": "AllBlocksCleared"},
        ]},
    )
    return out


def main():
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "service/tests/fixtures")
    target.mkdir(parents=True, exist_ok=True)
    encoder = msgspec.msgpack.Encoder()
    for name, (batch, expected) in fixtures().items():
        (target / f"{name}.msgpack").write_bytes(encoder.encode(batch))
        (target / f"{name}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
