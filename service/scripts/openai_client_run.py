"""Drives an OpenAI-compatible server (the gateway, or a fake engine) with the official client.

Run:
  python3 openai_client_run.py --base-url http://127.0.0.1:P/v1 --model NAME --scenario S
      [--json-args '{...}'] [--timeout SECONDS]

It runs one scenario and prints ONE JSON line of results to stdout, then exits 0; it exits 1
only on an unexpected exception (a traceback on stderr). The client has `max_retries=0`: any
retrying is the server's job. Scenarios and what they print:

  completions          {"text", "finish_reason", "usage"}          a non-stream completion
  completions_stream   {"chunks", "text", "finish_reason", "usage", "done"}
  chat                 {"text", "finish_reason", "usage"}          a non-stream chat completion
  chat_stream          {"chunks", "text", "finish_reason", "usage", "done"}
        json-args for these four: "prompt" (completions), "messages" (chat; default a system +
        user pair), "max_tokens" (default 16), "include_usage" (streams; default true).
        "done" is true when the stream ended normally after a chunk with a finish_reason.
  errors               {CASE: {"status", "type", "message", "code", "param"}} for the cases
        unknown_model, long_prompt (json-args "long_prompt_words", default 5000), bad_params
        (max_tokens -1), bad_role (a chat role the template rejects), unknown_route (an
        embeddings call: a route the server lacks) and bad_json (a raw POST of broken JSON
        with httpx); each as `openai.APIStatusError` exposes it ("message" is the
        body's error message, "client_message" the exception's text). A case the server
        answered without an error reads {"status": 200, "unexpected": "no error"}.
  models               {"listed": [ids], "retrieved": {"id", "object"}, "missing": {...}}
        `models.list()`, `models.retrieve(model)`, and `models.retrieve` of json-args "missing"
        (default "no-such/model"), whose error reads as in `errors`, plus its "exception" class.
  shared_prefix        {"ok", "failed", "errors"}
        json-args {"prefixes": K, "requests": N, "prefix_words": W, "concurrency": C,
        "max_tokens": T (default 8), "kind": "chat"|"completions" (default chat),
        "stream": false}: N requests, request i on shared prefix i % K (W deterministic words)
        plus a short unique suffix, C at a time (AsyncOpenAI).
  load                 {"ok", "failed", "failed_before_first_chunk", "started_streaming_failed",
                        "errors"}
        json-args {"requests": N, "concurrency": C, "stream": true, "max_tokens": T,
        "kind": "completions"|"chat" (default completions)}. A streamed request fails if it
        raises or ends without a finish_reason; one that failed after its first chunk counts in
        started_streaming_failed, one before in failed_before_first_chunk; failed = both.
"""

import argparse
import asyncio
import json
import random
import sys
import traceback

import openai

try:  # the HTTP client the openai package is built on
    import httpx2 as httpx
except ImportError:  # older openai releases use httpx
    import httpx

DEFAULT_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello to the router test."},
]
DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog"
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu cache block router prefix token engine worker stream").split()
MAX_ERRORS = 5


def words(count, seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def error_info(error):
    """What `openai.APIStatusError` exposes of an error answer."""
    body = error.body if isinstance(error.body, dict) else {}
    message = body.get("message") if isinstance(body.get("message"), str) else None
    return {"status": error.status_code, "type": error.type, "message": message or error.message,
            "code": error.code, "param": error.param, "client_message": error.message}


def describe(error):
    if isinstance(error, openai.APIStatusError):
        return f"{type(error).__name__} {error.status_code}: {error.message}"
    return f"{type(error).__name__}: {error}"


# --- single requests --------------------------------------------------------------------------
def run_completions(client, model, args):
    answer = client.completions.create(model=model, prompt=args.get("prompt", DEFAULT_PROMPT),
                                       max_tokens=args.get("max_tokens", 16))
    choice = answer.choices[0]
    return {"text": choice.text, "finish_reason": choice.finish_reason,
            "usage": answer.usage.model_dump() if answer.usage else None}


def run_chat(client, model, args):
    answer = client.chat.completions.create(model=model,
                                            messages=args.get("messages", DEFAULT_MESSAGES),
                                            max_tokens=args.get("max_tokens", 16))
    choice = answer.choices[0]
    return {"text": choice.message.content, "finish_reason": choice.finish_reason,
            "usage": answer.usage.model_dump() if answer.usage else None}


def collect_stream(stream, chat):
    chunks, texts, finish, usage = 0, [], None, None
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            piece = choice.delta.content if chat else choice.text
            if piece:
                texts.append(piece)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {"chunks": chunks, "text": "".join(texts), "finish_reason": finish, "usage": usage,
            "done": finish is not None}


def stream_options(args):
    return {"include_usage": True} if args.get("include_usage", True) else None


def run_completions_stream(client, model, args):
    stream = client.completions.create(model=model, prompt=args.get("prompt", DEFAULT_PROMPT),
                                       max_tokens=args.get("max_tokens", 16), stream=True,
                                       stream_options=stream_options(args))
    return collect_stream(stream, chat=False)


def run_chat_stream(client, model, args):
    stream = client.chat.completions.create(model=model,
                                            messages=args.get("messages", DEFAULT_MESSAGES),
                                            max_tokens=args.get("max_tokens", 16), stream=True,
                                            stream_options=stream_options(args))
    return collect_stream(stream, chat=True)


def run_errors(client, model, args, base_url, timeout):
    long_prompt = words(args.get("long_prompt_words", 5000), seed=1)
    cases = {
        "unknown_model": lambda: client.completions.create(
            model="no-such-model-for-the-test", prompt="hello", max_tokens=4),
        "long_prompt": lambda: client.completions.create(
            model=model, prompt=long_prompt, max_tokens=4),
        "bad_params": lambda: client.completions.create(
            model=model, prompt="hello", max_tokens=-1),
        "bad_role": lambda: client.chat.completions.create(
            model=model, messages=[{"role": "narrator", "content": "hi"}], max_tokens=4),
        "unknown_route": lambda: client.embeddings.create(model=model, input="hello"),
    }
    results = {}
    for name, call in cases.items():
        try:
            call()
            results[name] = {"status": 200, "unexpected": "no error"}
        except openai.APIStatusError as error:
            results[name] = error_info(error)

    # Broken JSON cannot be sent through the client's typed methods: post it raw, and read the
    # answer as the client would (the client's own status-error factory).
    response = httpx.post(base_url.rstrip("/") + "/chat/completions",
                          content=b'{"model": "' + model.encode() + b'", "messages": [',
                          headers={"Content-Type": "application/json",
                                   "Authorization": f"Bearer {client.api_key}"},
                          timeout=timeout)
    if response.status_code >= 400:
        results["bad_json"] = error_info(client._make_status_error_from_response(response))
    else:
        results["bad_json"] = {"status": response.status_code, "unexpected": "no error"}
    return results


def run_models(client, model, args):
    listed = [entry.id for entry in client.models.list()]
    retrieved = client.models.retrieve(model)
    try:
        client.models.retrieve(args.get("missing", "no-such/model"))
        missing = {"status": 200, "unexpected": "no error"}
    except openai.APIStatusError as error:
        missing = error_info(error)
        missing["exception"] = type(error).__name__
    return {"listed": listed, "retrieved": {"id": retrieved.id, "object": retrieved.object},
            "missing": missing}


# --- concurrent traffic -----------------------------------------------------------------------
async def one_request(client, model, kind, prompt, max_tokens, stream):
    """Sends one request; returns (ok, chunks_before_failure, error message or None)."""
    chunks = 0
    try:
        if kind == "chat":
            messages = [{"role": "user", "content": prompt}]
            call = client.chat.completions.create(model=model, messages=messages,
                                                  max_tokens=max_tokens, stream=stream)
        else:
            call = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                             stream=stream)
        answer = await call
        if not stream:
            return True, 0, None
        finish = None
        async for chunk in answer:
            chunks += 1
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
        if finish is None:
            return False, chunks, "the stream ended without a finish_reason"
        return True, chunks, None
    except openai.APIError as error:
        return False, chunks, describe(error)
    except Exception as error:  # noqa: BLE001 - a transport error the client did not wrap, etc.
        return False, chunks, describe(error)


async def run_many(client, model, prompts, concurrency, kind, max_tokens, stream):
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def bounded(prompt):
        async with semaphore:
            return await one_request(client, model, kind, prompt, max_tokens, stream)

    return await asyncio.gather(*(bounded(p) for p in prompts))


def summarize(outcomes):
    failures = [o for o in outcomes if not o[0]]
    return {"ok": len(outcomes) - len(failures), "failed": len(failures),
            "failed_before_first_chunk": sum(1 for o in failures if o[1] == 0),
            "started_streaming_failed": sum(1 for o in failures if o[1] > 0),
            "errors": [o[2] for o in failures][:MAX_ERRORS]}


async def run_shared_prefix(client, model, args):
    k = max(1, args.get("prefixes", 1))
    prefixes = [words(args.get("prefix_words", 300), seed=1000 + i) for i in range(k)]
    prompts = [f"{prefixes[i % k]} Question {i}: {words(6, seed=i + 7)}?"
               for i in range(args.get("requests", 8))]
    outcomes = await run_many(client, model, prompts, args.get("concurrency", 1),
                              args.get("kind", "chat"), args.get("max_tokens", 8),
                              args.get("stream", False))
    summary = summarize(outcomes)
    return {"ok": summary["ok"], "failed": summary["failed"], "errors": summary["errors"]}


async def run_load(client, model, args):
    prompts = [f"Load request {i}: {words(20, seed=50_000 + i)}"
               for i in range(args.get("requests", 32))]
    return summarize(await run_many(client, model, prompts, args.get("concurrency", 8),
                                    args.get("kind", "completions"), args.get("max_tokens", 16),
                                    args.get("stream", True)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:P/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--scenario", required=True,
                        choices=["completions", "completions_stream", "chat", "chat_stream",
                                 "errors", "models", "shared_prefix", "load"])
    parser.add_argument("--json-args", default="{}")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    parser.add_argument("--api-key", default="test-key")
    options = parser.parse_args()
    args = json.loads(options.json_args)
    try:
        if options.scenario in ("shared_prefix", "load"):
            async def run():
                async with openai.AsyncOpenAI(base_url=options.base_url, api_key=options.api_key,
                                              max_retries=0, timeout=options.timeout) as client:
                    if options.scenario == "shared_prefix":
                        return await run_shared_prefix(client, options.model, args)
                    return await run_load(client, options.model, args)
            result = asyncio.run(run())
        else:
            client = openai.OpenAI(base_url=options.base_url, api_key=options.api_key,
                                   max_retries=0, timeout=options.timeout)
            if options.scenario == "errors":
                result = run_errors(client, options.model, args, options.base_url,
                                    options.timeout)
            else:
                runner = {"completions": run_completions, "chat": run_chat,
                          "completions_stream": run_completions_stream,
                          "chat_stream": run_chat_stream,
                          "models": run_models}[options.scenario]
                result = runner(client, options.model, args)
    except Exception:  # noqa: BLE001 - any unexpected failure: traceback and exit 1
        traceback.print_exc()
        sys.exit(1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
