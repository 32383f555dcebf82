#!/usr/bin/env bash
# The gateway bench: builds what it needs, creates the bench venv (pinned sglang-router and
# vllm-router), writes the word-level tokenizer fixture, then runs every scenario against
# direct engine calls, our gateway, sglang-router, vllm-router (cache_aware) and vllm-router
# (kv_aware), and prints one table (JSON in target/gateway-bench.json).
#
#   benches/gateway/run.sh                      # everything
#   benches/gateway/run.sh --gateways direct,sglang --throughput-secs 5   # any `run` flag
#   SKIP_BUILD_OURS=1 benches/gateway/run.sh    # use the existing target/release/kv-router
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

SGLANG_ROUTER_VERSION=0.3.2
VLLM_ROUTER_VERSION=0.1.17
PYTHON="${PYTHON:-python3.11}"
venv="$here/target/bench-venv"

bench_pid=""
cleanup() {
  if [[ -n "$bench_pid" ]] && kill -0 "$bench_pid" 2>/dev/null; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    sleep 3
    kill -KILL "$bench_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

echo "== building the bench (benches/gateway, release)"
timeout 1800 cargo build --release --quiet

if [[ -z "${SKIP_BUILD_OURS:-}" ]]; then
  echo "== building kv-router (release) in $root"
  (cd "$root" && timeout 3000 cargo build --release --quiet -p kv-router)
fi

want="sglang-router==$SGLANG_ROUTER_VERSION vllm-router==$VLLM_ROUTER_VERSION"
installed="$("$venv/bin/python" -m pip freeze 2>/dev/null || true)"
if ! grep -qx "sglang-router==$SGLANG_ROUTER_VERSION" <<<"$installed" \
   || ! grep -qx "vllm-router==$VLLM_ROUTER_VERSION" <<<"$installed"; then
  echo "== creating $venv ($want)"
  "$PYTHON" -m venv "$venv"
  timeout 900 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want
fi

echo "== writing the word-level tokenizer fixture"
./target/release/gateway-bench fixture target/bench-model

echo "== running (each phase shows a progress line; logs in target/logs/)"
# The whole run is bounded: every phase has its own time or request limit, and this cap
# stops anything that hangs.
timeout 1800 ./target/release/gateway-bench run \
  --kv-router "$root/target/release/kv-router" --venv "$venv" \
  --model-dir target/bench-model "$@" &
bench_pid=$!
wait "$bench_pid"
