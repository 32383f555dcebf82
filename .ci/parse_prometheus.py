"""Parses Prometheus text exposition format from stdin with the official client's parser.

Prints one JSON object: {"families": [{"name", "type", "documentation", "samples": [{"name",
"labels", "value"}]}]}. Exits 1 with the parser's message if the text does not parse.
Used by core/tests/prometheus_exposition.rs (through KV_ROUTER_PYTHON).
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    try:
        families = [
            {
                "name": family.name,
                "type": family.type,
                "documentation": family.documentation,
                "samples": [
                    {"name": sample.name, "labels": sample.labels, "value": sample.value}
                    for sample in family.samples
                ],
            }
            for family in text_string_to_metric_families(text)
        ]
    except Exception as error:  # the parser raises ValueError and others on bad input
        print(f"not valid Prometheus text: {error!r}", file=sys.stderr)
        return 1
    json.dump({"families": families}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
