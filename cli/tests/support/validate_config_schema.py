"""Validates router YAML documents against the JSON Schema `kv-router schema` printed.

Used by cli/tests/config_schema.rs as an independent validator (`jsonschema` and `PyYAML`,
pinned in .ci/requirements.txt). Reads one JSON object on standard input:

    {"schema": {...}, "documents": [{"name": "page.yaml", "text": "worker_selection: ..."}]}

and prints one JSON object: `{"schema_error": null | "...", "results": [{"name": ...,
"errors": [{"path": "$.worker_selection.decode", "message": "..."}]}]}`, where each document's
errors include the nested ones (`anyOf`, `if`/`then` branches), so a test can ask whether the
schema flagged a given place.
"""

import json
import sys

import jsonschema
import yaml


def flatten(error):
    """The error and every error under it, each as a path and a message."""
    found = [{"path": error.json_path, "message": error.message}]
    for child in error.context or ():
        found.extend(flatten(child))
    return found


def main():
    request = json.load(sys.stdin)
    schema = request["schema"]
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        json.dump({"schema_error": str(error), "results": []}, sys.stdout)
        return
    if validator_class is not jsonschema.Draft202012Validator:
        json.dump(
            {"schema_error": f"expected draft 2020-12, got {validator_class.__name__}", "results": []},
            sys.stdout,
        )
        return
    validator = validator_class(schema)
    results = []
    for document in request["documents"]:
        try:
            instance = yaml.safe_load(document["text"])
        except yaml.YAMLError as error:
            results.append({"name": document["name"], "errors": [{"path": "$", "message": f"YAML: {error}"}]})
            continue
        if instance is None:
            instance = {}
        errors = []
        for error in validator.iter_errors(instance):
            errors.extend(flatten(error))
        results.append({"name": document["name"], "errors": errors})
    json.dump({"schema_error": None, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
