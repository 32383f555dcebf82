"""Checks the invariants of a `kv-router replay --json` report; exits 1 naming each violation."""
import json
import sys


def violations(report):
    for config in report["configs"]:
        name = config["name"]
        if config["served"] != config["requests"]:
            yield f"{name}: served {config['served']} of {config['requests']} requests ({config['book_failures']})"
        if config["hints"]["policy_failures"]:
            yield f"{name}: {config['hints']['policy_failures']} policy failures"
        for stage in config["stages"]:
            where = f"{name} {stage['role']}"
            total = stage["local"] + stage["fetched"] + stage["recomputed"]
            if total != stage["blocks"]:
                yield f"{where}: local + fetched + recomputed = {total}, blocks = {stage['blocks']}"
            if stage["conservation_violations"]:
                yield f"{where}: {stage['conservation_violations']} requests broke block conservation"


def main(path):
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    problems = list(violations(report))
    for problem in problems:
        print(f"replay invariant violated: {problem}")
    if problems:
        return 1
    print(f"replay invariants hold for {len(report['configs'])} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
