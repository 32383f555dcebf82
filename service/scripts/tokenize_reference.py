"""The Python side of the gateway tokenizer cross-check (service/tests/gateway_tokenizer.rs).

Reads one JSON object on stdin, {"model_dir": ..., "commands": [...]}, and writes a JSON list
with one result per command on stdout. Commands:
  {"op": "encode", "text": ..., "add_special_tokens": bool}  -> {"ids": [...]}
  {"op": "chat", "body": {...}}                              -> {"text": ..., "ids": [...]}
                                                                or {"error": ...} when the
                                                                template raised
The chat template is rendered as transformers renders it (jinja2's sandbox with trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson, raise_exception, strftime_now); a chat
body's messages and tools are taken as vLLM hands them over for a string-content template
(text parts joined with "\\n"; tools in `model_dump()` order). Needs the `tokenizers` and `jinja2` packages.
"""

import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def content(value):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "\n".join(part if isinstance(part, str) else part["text"] for part in value)


def vllm_tool(tool):
    """A tool as vLLM's ChatCompletionToolsParam.model_dump() lays it out."""
    function = tool["function"]
    declared = {key: function.get(key) for key in ("name", "description", "parameters")}
    extra = {key: value for key, value in tool.items() if key not in ("type", "function")}
    return {"type": tool.get("type", "function"), "function": {**declared, **function}, **extra}


def chat(template, config, tokenizer, body):
    messages = [dict(message, content=content(message.get("content"))) for message in body["messages"]]
    specials = {key: config[key] for key in ("bos_token", "eos_token", "pad_token", "unk_token") if key in config}
    kwargs = dict(body.get("chat_template_kwargs") or {})
    try:
        text = template.render(
            messages=messages,
            tools=None if body.get("tools") is None else [vllm_tool(tool) for tool in body["tools"]],
            documents=body.get("documents"),
            add_generation_prompt=body.get("add_generation_prompt", True),
            **{**specials, **kwargs},
        )
    except jinja2.exceptions.TemplateError as error:
        return {"error": str(error)}
    ids = tokenizer.encode(text, add_special_tokens=body.get("add_special_tokens", False)).ids
    return {"text": text, "ids": ids}


def main():
    request = json.load(sys.stdin)
    model = Path(request["model_dir"])
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    config = json.loads((model / "tokenizer_config.json").read_text())
    template = environment().from_string(config["chat_template"])
    results = []
    for command in request["commands"]:
        if command["op"] == "encode":
            ids = tokenizer.encode(command["text"], add_special_tokens=command["add_special_tokens"]).ids
            results.append({"ids": ids})
        else:
            results.append(chat(template, config, tokenizer, command["body"]))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
