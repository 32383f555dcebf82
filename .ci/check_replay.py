"""Checks a `kv-router replay --json` report of the three configurations .ci/run replays.

Exits 1 naming each violation: a configuration missing, a request not served, a policy failure,
a disagreement between the simulated workers and the router (the report's `invariants`, each
comparing two independent records), or `kvcr` + `kv_fetch` fetching nothing.
"""
import json
import sys

EXPECTED = ("page.yaml", "default-cost-no-hints.yaml", "kvcr-kv-fetch.yaml")
FETCHING = "kvcr-kv-fetch.yaml"


def violations(report):
    configs = {config["name"]: config for config in report["configs"]}
    for name in EXPECTED:
        if name not in configs:
            yield f"{name}: missing from the report (it has {sorted(configs) or 'no configuration'})"
    for name, config in configs.items():
        if config["served"] != config["requests"] or config["requests"] == 0:
            yield f"{name}: served {config['served']} of {config['requests']} requests ({config['book_failures']})"
        if config["hints"]["policy_failures"]:
            yield f"{name}: {config['hints']['policy_failures']} policy failures"
        for invariant, count in config["invariants"].items():
            if count:
                yield f"{name}: invariant {invariant} violated {count} times"
        for stage in config["stages"]:
            if stage["served"] != config["requests"]:
                yield f"{name} {stage['role']}: served {stage['served']} of {config['requests']}"
    fetching = configs.get(FETCHING)
    if fetching is not None:
        fetched = sum(stage["fetched"] for stage in fetching["stages"])
        if fetched == 0 or fetching["hints"]["fetch_actions"] == 0:
            yield f"{FETCHING}: kvcr + kv_fetch fetched no block ({fetching['hints']['fetch_actions']} kv.fetch actions)"


def main(path):
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    problems = list(violations(report))
    for problem in problems:
        print(f"replay check failed: {problem}")
    if problems:
        return 1
    print(f"replay checks hold for {len(report['configs'])} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
