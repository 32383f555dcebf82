"""A fake vLLM-like OpenAI server for the gateway's end-to-end tests.

It serves OpenAI's `/v1/completions` and `/v1/chat/completions` (stream and non-stream) on
aiohttp, tokenizes every request as the gateway and a real vLLM do (the model dir's
tokenizer.json through `tokenizers`; chat rendered from tokenizer_config.json's `chat_template`
with jinja2 as Hugging Face renders it), "caches" the prompt's full blocks in an LRU and
publishes what it cached as vLLM KV events over ZMQ, so a router indexing those events sees
what a real engine would. It records every request (prefix hit at arrival, the router's hint
in the body or header, all headers) for the test to inspect, and can be told to fail.

Run:
  python3 fake_openai_engine.py --model NAME --tokenizer DIR [--block-size 16]
      [--kv-blocks 4096] [--token-interval-ms 1] [--max-lifetime-s 300] [--worker-id N]
      [--max-model-len N]

It binds HTTP, a ZMQ PUB and a ZMQ ROUTER (replay) socket on 127.0.0.1 (free ports), prints ONE
JSON line `{"http": "http://127.0.0.1:P", "events": "tcp://127.0.0.1:Q",
"replay": "tcp://127.0.0.1:R"}`, then serves until killed or `--max-lifetime-s` passes.

Routes:
  POST /v1/completions, POST /v1/chat/completions   generation: `max_tokens` (default 16) tokens
        decoded from the vocabulary, one per SSE chunk every `--token-interval-ms`; honours
        `stream_options.include_usage`; unknown model -> 404, bad JSON or params -> 400, a
        prompt plus max_tokens over `--max-model-len` -> 400, all in OpenAI's error shape.
  GET  /v1/models, GET /health (503 while the fault mode is "unhealthy")
  GET  /_fake/requests   one record a generation request, in arrival order:
        {"request_id", "route", "model", "stream", "prompt_tokens", "prompt_token_ids" (first 64),
         "cached_blocks" (leading prompt blocks already cached at arrival), "total_blocks",
         "kv_hint" (body kv_transfer_params.kv_hint or null), "kv_hint_header" (parsed
         x-dynamo-kv-hint or null), "headers", "body_keys", "fault" (mode applied or null),
         "finished", "cancelled" (the client went away mid-answer)}
  GET  /_fake/stats      {"requests", "active", "cancelled", "completed", "failed_injected",
                          "blocks_cached", "events_published", "worker_id"}
  POST /_fake/fail       {"mode": "status500"|"hang"|"close"|"midstream_error", "count": N}
        makes the next N generation requests answer 500 before any byte / never answer headers /
        close the connection without answering / send a few SSE chunks (non-stream: headers and
        part of the body) then drop the connection; {"mode": "unhealthy"} makes /health answer
        503; {"mode": "off"} clears both.

KV events: block i of a prompt is identified by a 64-bit hash chained over blocks 0..i (its
position-chained identity). Each request publishes one vLLM `KVEventBatch` (the positional
structs of engine_fixtures.py) with a `BlockStored` for the blocks that were not cached
(parent = the id of the block before the first new one, or None) and a `BlockRemoved` for the
LRU blocks evicted past `--kv-blocks`. Frames are `[topic b"", seq (8 bytes big-endian),
payload]`; the ROUTER answers `[id, b"", start_seq]` with `[id, b"", seq, payload]` per
buffered batch from start_seq and the end marker `[id, b"", -1, b""]`, as pyzmq_engine.py and
vLLM's publisher do.
"""

import argparse
import asyncio
import collections
import datetime
import hashlib
import json
import os
import pathlib
import sys
import threading
import time
import uuid

import jinja2
import jinja2.ext
import msgspec
import zmq
from aiohttp import web
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from engine_fixtures import BlockRemoved, BlockStored, VllmEventBatch  # noqa: E402

REPLAY_BUFFER = 10_000
RECORD_TOKEN_IDS = 64
MIDSTREAM_CHUNKS = 3


def log(worker_id, message):
    print(f"[fake-engine {worker_id}] {message}", file=sys.stderr, flush=True)


# --- errors -----------------------------------------------------------------------------------
class ApiError(Exception):
    """An error answered in OpenAI's shape (vLLM's `ErrorResponse`)."""

    TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}

    def __init__(self, status, message, param=None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def response(self):
        return error_response(self.status, self.message, self.param)


def error_response(status, message, param=None):
    body = {"error": {"message": message, "type": ApiError.TYPES.get(status, "APIError"),
                      "param": param, "code": status}}
    return web.json_response(body, status=status)


# --- tokenization as Hugging Face / vLLM ------------------------------------------------------
class AssistantTracker(jinja2.ext.Extension):
    """Hugging Face's `{% generation %}` tag; here it only renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body)
        return call.set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def _token_content(value):
    """A special token's text from tokenizer_config.json (a string or an AddedToken dict)."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class ModelTokenizer:
    """tokenizer.json + tokenizer_config.json's chat template, as `transformers` uses them."""

    def __init__(self, directory):
        directory = pathlib.Path(directory)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config = json.loads((directory / "tokenizer_config.json").read_text())
        self.model_max_length = config.get("model_max_length")
        self.special_tokens = {}
        for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                     "cls_token", "mask_token"):
            content = _token_content(config.get(name))
            if content is not None:
                self.special_tokens[name] = content
        extra = config.get("additional_special_tokens")
        if extra:
            self.special_tokens["additional_special_tokens"] = [_token_content(t) for t in extra]
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the "default" one
            named = {t["name"]: t["template"] for t in template}
            template = named.get("default")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[AssistantTracker, jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.template = env.from_string(template) if template else None
        self.output_pool = self._printable_tokens()

    def _printable_tokens(self):
        """Token ids that decode alone to plain printable ASCII (what the engine 'generates')."""
        special = set(self.tokenizer.get_added_tokens_decoder())
        pool = []
        for token_id in range(self.tokenizer.get_vocab_size(with_added_tokens=False)):
            if token_id in special:
                continue
            text = self.tokenizer.decode([token_id])
            if text and text.isascii() and text.isprintable() and text.strip():
                pool.append((token_id, text))
        return pool or [(0, "x")]

    def encode(self, text, add_special_tokens):
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def render_chat(self, messages, tools=None, documents=None, chat_template_kwargs=None):
        if self.template is None:
            raise ApiError(400, "the model has no chat template")
        extra = dict(chat_template_kwargs or {})
        add_generation_prompt = extra.pop("add_generation_prompt", True)
        try:
            return self.template.render(messages=messages, tools=tools, documents=documents,
                                        add_generation_prompt=add_generation_prompt,
                                        **self.special_tokens, **extra)
        except jinja2.exceptions.TemplateError as error:
            raise ApiError(400, f"chat template error: {error}") from None


def chat_messages(raw):
    """OpenAI messages as vLLM hands them to the template: text parts joined with newlines."""
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list", "messages")
    messages = []
    for message in raw:
        if not isinstance(message, dict) or "role" not in message:
            raise ApiError(400, "each message needs a 'role'", "messages")
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            texts = [part.get("text", "") for part in content
                     if isinstance(part, dict) and part.get("type") == "text"]
            message["content"] = "\n".join(texts)
        elif content is None:
            message["content"] = ""
        elif not isinstance(content, str):
            raise ApiError(400, "message content must be a string or a list of parts", "messages")
        messages.append(message)
    return messages


def completion_prompts(tokenizer, prompt):
    """The token ids of each prompt of a completions request, as vLLM splits them."""
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt, add_special_tokens=True)]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [list(prompt)]
        if all(isinstance(p, str) for p in prompt):
            return [tokenizer.encode(p, add_special_tokens=True) for p in prompt]
        if all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise ApiError(400, "'prompt' must be a string, a list of strings, or token ids", "prompt")


# --- KV cache and events ----------------------------------------------------------------------
def chain_hash(parent, tokens):
    """The 64-bit id of a block: blake2b over its parent's id and its tokens."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update((parent or 0).to_bytes(8, "big"))
    digest.update(b"".join(t.to_bytes(4, "big", signed=False) for t in tokens))
    return int.from_bytes(digest.digest(), "big")


class KvCache:
    """An LRU of prompt blocks that publishes vLLM KV events of what it stores and evicts."""

    def __init__(self, block_size, capacity, worker_id):
        self.block_size, self.capacity, self.worker_id = block_size, capacity, worker_id
        self.blocks = collections.OrderedDict()  # id -> None, oldest first
        self.context = zmq.Context()
        self.publisher = self.context.socket(zmq.PUB)
        self.events_port = self.publisher.bind_to_random_port("tcp://127.0.0.1")
        self.router = self.context.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.buffer = collections.deque(maxlen=REPLAY_BUFFER)
        self.next_seq = 0
        self.lock = threading.Lock()
        self.encoder = msgspec.msgpack.Encoder()
        self.published = 0
        threading.Thread(target=self._serve_replays, daemon=True).start()

    def _serve_replays(self):
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while True:
            if not poller.poll(100):
                continue
            frames = self.router.recv_multipart()
            peer, start = frames[0], int.from_bytes(frames[-1], "big")
            with self.lock:
                kept = [(seq, payload) for seq, payload in self.buffer if seq >= start]
            for seq, payload in kept:
                self.router.send_multipart([peer, b"", seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([peer, b"", (-1).to_bytes(8, "big", signed=True), b""])

    def block_ids(self, tokens):
        """The chained ids of the prompt's full blocks, with each block's tokens."""
        ids, parent = [], None
        for start in range(0, len(tokens) - self.block_size + 1, self.block_size):
            chunk = tokens[start:start + self.block_size]
            parent = chain_hash(parent, chunk)
            ids.append((parent, chunk))
        return ids

    def cached_prefix(self, blocks):
        hit = 0
        for block_id, _ in blocks:
            if block_id not in self.blocks:
                break
            hit += 1
        return hit

    def admit(self, blocks):
        """Caches the prompt's blocks; returns the prefix hit it had at arrival."""
        hit = self.cached_prefix(blocks)
        new = blocks[hit:]
        # Touch the tail first so a prompt's later blocks are evicted before its earlier ones
        # (as vLLM frees a request's blocks in reverse order).
        for block_id, _ in reversed(blocks):
            self.blocks[block_id] = None
            self.blocks.move_to_end(block_id)
        events = []
        if new:
            parent = blocks[hit - 1][0] if hit else None
            tokens = [t for _, chunk in new for t in chunk]
            events.append(BlockStored([b for b, _ in new], parent, tokens, self.block_size,
                                      None, None, None))
        evicted = []
        while len(self.blocks) > self.capacity:
            evicted.append(self.blocks.popitem(last=False)[0])
        if evicted:
            events.append(BlockRemoved(evicted, None))
        if events:
            self.publish(events)
        return hit

    def publish(self, events):
        payload = self.encoder.encode(VllmEventBatch(time.time(), events, None))
        with self.lock:
            seq = self.next_seq
            self.next_seq += 1
            self.buffer.append((seq, payload))
        self.publisher.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        self.published += 1


# --- the server -------------------------------------------------------------------------------
class Engine:
    def __init__(self, args):
        self.args = args
        self.model = args.model
        self.tokenizer = ModelTokenizer(args.tokenizer)
        self.max_model_len = args.max_model_len or self.tokenizer.model_max_length or 1 << 30
        self.cache = KvCache(args.block_size, args.kv_blocks, args.worker_id)
        self.records = []
        self.stats = collections.Counter()
        self.active = 0
        self.fault_mode, self.fault_count = None, 0
        self.unhealthy = False

    def app(self):
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/_fake/requests", self.fake_requests)
        app.router.add_get("/_fake/stats", self.fake_stats)
        app.router.add_post("/_fake/fail", self.fake_fail)
        return app

    # -- introspection and control --
    async def models(self, _request):
        return web.json_response({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": int(time.time()),
            "owned_by": "fake-engine", "root": self.model, "parent": None,
            "max_model_len": self.max_model_len}]})

    async def health(self, _request):
        return web.Response(status=503 if self.unhealthy else 200)

    async def fake_requests(self, _request):
        return web.json_response(self.records)

    async def fake_stats(self, _request):
        return web.json_response({
            "requests": self.stats["requests"], "active": self.active,
            "cancelled": self.stats["cancelled"], "completed": self.stats["completed"],
            "failed_injected": self.stats["failed_injected"],
            "blocks_cached": len(self.cache.blocks), "events_published": self.cache.published,
            "worker_id": self.args.worker_id})

    async def fake_fail(self, request):
        try:
            body = await request.json()
            mode = body["mode"]
        except (ValueError, KeyError, TypeError):
            return error_response(400, "expected {\"mode\": ..., \"count\": N}")
        if mode == "off":
            self.fault_mode, self.fault_count, self.unhealthy = None, 0, False
        elif mode == "unhealthy":
            self.unhealthy = True
        elif mode in ("status500", "hang", "close", "midstream_error"):
            self.fault_mode, self.fault_count = mode, int(body.get("count", 1))
        else:
            return error_response(400, f"unknown fault mode {mode!r}")
        log(self.args.worker_id, f"fault mode {mode} count {body.get('count')}")
        return web.json_response({"mode": mode, "count": self.fault_count})

    def take_fault(self):
        if self.fault_mode and self.fault_count > 0:
            mode = self.fault_mode
            self.fault_count -= 1
            if self.fault_count == 0:
                self.fault_mode = None
            return mode
        return None

    # -- generation --
    async def completions(self, request):
        return await self.generate(request, "completions")

    async def chat_completions(self, request):
        return await self.generate(request, "chat")

    async def parse(self, request, route):
        """The body, the prompts' token ids and the generation parameters, or an ApiError."""
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as error:
            raise ApiError(400, f"invalid JSON body: {error}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        model = body.get("model")
        if model != self.model:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")
        if route == "chat":
            messages = chat_messages(body.get("messages"))
            text = self.tokenizer.render_chat(messages, body.get("tools"), body.get("documents"),
                                              body.get("chat_template_kwargs"))
            prompts = [self.tokenizer.encode(text, add_special_tokens=False)]
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        else:
            if "prompt" not in body:
                raise ApiError(400, "'prompt' is required", "prompt")
            prompts = completion_prompts(self.tokenizer, body["prompt"])
            max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = 16
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        temperature = body.get("temperature")
        if temperature is not None and (not isinstance(temperature, (int, float))
                                        or not 0 <= temperature <= 2):
            raise ApiError(400, f"temperature must be in [0, 2], got {temperature}.", "temperature")
        n = body.get("n", 1)
        if n != 1:
            raise ApiError(400, "only n=1 is supported", "n")
        for ids in prompts:
            if len(ids) + max_tokens > self.max_model_len:
                raise ApiError(400, (
                    f"This model's maximum context length is {self.max_model_len} tokens. "
                    f"However, you requested {len(ids) + max_tokens} tokens ({len(ids)} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of the "
                    "messages or completion."), "input_tokens")
        stream = bool(body.get("stream", False))
        include_usage = bool(stream and (body.get("stream_options") or {}).get("include_usage"))
        return body, prompts, max_tokens, stream, include_usage

    async def generate(self, request, route):
        self.stats["requests"] += 1
        try:
            body, prompts, max_tokens, stream, include_usage = await self.parse(request, route)
        except ApiError as error:
            return error.response()
        headers = {k.lower(): v for k, v in request.headers.items()}
        hint_header = headers.get("x-dynamo-kv-hint")
        if hint_header is not None:
            try:
                hint_header = json.loads(hint_header)
            except ValueError:
                hint_header = {"unparsed": hint_header}
        params = body.get("kv_transfer_params")
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        block_lists = [self.cache.block_ids(ids) for ids in prompts]
        record = {
            "request_id": request_id, "route": route, "model": body.get("model"),
            "stream": stream, "prompt_tokens": sum(len(ids) for ids in prompts),
            "prompt_token_ids": prompts[0][:RECORD_TOKEN_IDS],
            "cached_blocks": sum(self.cache.cached_prefix(b) for b in block_lists),
            "total_blocks": sum(len(b) for b in block_lists),
            "kv_hint": params.get("kv_hint") if isinstance(params, dict) else None,
            "kv_hint_header": hint_header, "headers": headers, "body_keys": sorted(body),
            "fault": None, "finished": False, "cancelled": False,
        }
        self.records.append(record)

        fault = self.take_fault()
        record["fault"] = fault
        if fault:
            self.stats["failed_injected"] += 1
            log(self.args.worker_id, f"request {request_id}: injected fault {fault}")
        if fault == "status500":
            record["finished"] = True
            return error_response(500, "injected failure (status500)")
        if fault == "hang":
            try:
                await asyncio.sleep(self.args.max_lifetime_s)
            except asyncio.CancelledError:
                record["cancelled"] = True
                self.stats["cancelled"] += 1
                raise
            return error_response(500, "hung")
        if fault == "close":
            record["finished"] = True
            request.transport.close()
            raise asyncio.CancelledError()

        # Prefill: the prompt's blocks are cached (and published) from here on.
        for blocks in block_lists:
            self.cache.admit(blocks)
        self.active += 1
        try:
            if stream:
                return await self.stream_answer(request, route, record, prompts, max_tokens,
                                                include_usage, fault == "midstream_error")
            return await self.full_answer(request, route, record, prompts, max_tokens,
                                          fault == "midstream_error")
        except (asyncio.CancelledError, ConnectionResetError):
            if not record["finished"]:
                record["cancelled"] = True
                self.stats["cancelled"] += 1
                log(self.args.worker_id, f"request {request_id}: client went away")
            raise
        finally:
            self.active -= 1

    def tokens(self, prompt, max_tokens):
        """The generated tokens' texts: picked from the printable vocabulary by position."""
        pool = self.tokenizer.output_pool
        seed = len(prompt) * 7919
        return [pool[(seed + i * 31) % len(pool)][1] for i in range(max_tokens)]

    def usage(self, prompts, max_tokens):
        prompt_tokens = sum(len(p) for p in prompts)
        completion_tokens = max_tokens * len(prompts)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    async def full_answer(self, request, route, record, prompts, max_tokens, midstream_error):
        interval = self.args.token_interval_ms / 1000
        choices = []
        for index, prompt in enumerate(prompts):
            texts = []
            for text in self.tokens(prompt, max_tokens):
                if interval:
                    await asyncio.sleep(interval)
                texts.append(text)
            text = "".join(texts)
            if route == "chat":
                choices.append({"index": index, "message": {
                    "role": "assistant", "content": text, "reasoning_content": None,
                    "tool_calls": []}, "logprobs": None, "finish_reason": "length",
                    "stop_reason": None})
            else:
                choices.append({"index": index, "text": text, "logprobs": None,
                                "finish_reason": "length", "stop_reason": None})
        prefix = "chatcmpl-" if route == "chat" else "cmpl-"
        answer = {"id": prefix + record["request_id"],
                  "object": "chat.completion" if route == "chat" else "text_completion",
                  "created": int(time.time()), "model": self.model, "choices": choices,
                  "usage": self.usage(prompts, max_tokens)}
        data = json.dumps(answer).encode()
        if midstream_error:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
            record["finished"] = True
            request.transport.close()
            raise asyncio.CancelledError()
        record["finished"] = True
        self.stats["completed"] += 1
        return web.Response(body=data, content_type="application/json")

    async def stream_answer(self, request, route, record, prompts, max_tokens, include_usage,
                            midstream_error):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        interval = self.args.token_interval_ms / 1000
        prefix = "chatcmpl-" if route == "chat" else "cmpl-"
        base = {"id": prefix + record["request_id"],
                "object": "chat.completion.chunk" if route == "chat" else "text_completion",
                "created": int(time.time()), "model": self.model}
        sent = 0

        async def send(choices, usage=None, final_usage=False):
            chunk = dict(base, choices=choices)
            if include_usage or final_usage:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        for index, prompt in enumerate(prompts):
            if route == "chat":
                await send([{"index": index, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None}])
            texts = self.tokens(prompt, max_tokens)
            for position, text in enumerate(texts):
                if interval:
                    await asyncio.sleep(interval)
                if midstream_error and sent >= MIDSTREAM_CHUNKS:
                    record["finished"] = True
                    log(self.args.worker_id, f"request {record['request_id']}: dropping mid-stream")
                    request.transport.close()
                    raise asyncio.CancelledError()
                last = position == len(texts) - 1
                finish = "length" if last else None
                if route == "chat":
                    choice = {"index": index, "delta": {"content": text}, "logprobs": None,
                              "finish_reason": finish}
                else:
                    choice = {"index": index, "text": text, "logprobs": None,
                              "finish_reason": finish}
                if last:
                    choice["stop_reason"] = None
                await send([choice])
                sent += 1
        if include_usage:
            await send([], self.usage(prompts, max_tokens), final_usage=True)
        await response.write(b"data: [DONE]\n\n")
        record["finished"] = True
        self.stats["completed"] += 1
        await response.write_eof()
        return response


async def serve(args):
    engine = Engine(args)
    runner = web.AppRunner(engine.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(json.dumps({"http": f"http://127.0.0.1:{port}",
                      "events": f"tcp://127.0.0.1:{engine.cache.events_port}",
                      "replay": f"tcp://127.0.0.1:{engine.cache.replay_port}"}), flush=True)
    log(args.worker_id, f"serving {args.model} on port {port}")
    await asyncio.sleep(args.max_lifetime_s)
    log(args.worker_id, "max lifetime reached; exiting")
    await runner.cleanup()  # main() then exits the process, ZMQ threads and all


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--tokenizer", required=True,
                        help="a model dir with tokenizer.json and tokenizer_config.json")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-blocks", type=int, default=4096, help="LRU capacity in blocks")
    parser.add_argument("--token-interval-ms", type=float, default=1.0)
    parser.add_argument("--max-lifetime-s", type=float, default=300.0)
    parser.add_argument("--worker-id", default="0")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="context limit (default: tokenizer_config's model_max_length)")
    args = parser.parse_args()
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
