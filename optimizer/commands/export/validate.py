"""Every manifest checked offline against the vendored schema of its kind (schemas/README.md).

Kubernetes prunes, or with strict field validation refuses, a field a CRD's structural schema
does not declare; JSON Schema accepts it unless told otherwise. So each object schema that
lists its properties and says nothing of others (and does not preserve unknown fields) is
read here with ``additionalProperties: false``: a field the schema does not know fails, as
the API server would drop it. The vendored files stay as upstream wrote them (pruned).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

from jsonschema import Draft202012Validator

from optimizer.base.errors import Origin, ScenarioError

SCHEMAS = {  # manifest kind → vendored schema file
    "DynamoGraphDeployment": "dynamo-graphdeployment-v1alpha1.schema.json",
    "DynamoGraphDeploymentScalingAdapter": "dynamo-graphdeploymentscalingadapter-v1alpha1.schema.json",
    "DynamoGraphDeploymentRequest": "dynamo-graphdeploymentrequest-v1alpha1.schema.json",
    "LLMInferenceService": "kserve-llminferenceservice-v1alpha2.schema.json",
    "production-stack values": "vllm-production-stack-values.schema.json",
    "SkyServe service": "skypilot-task-service.schema.json",
}


def _strict(node):
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def validator(kind: str) -> Draft202012Validator:
    text = files("optimizer.commands.export").joinpath("schemas", SCHEMAS[kind]).read_text(encoding="utf-8")
    return Draft202012Validator(_strict(json.loads(text)))


def check(kind: str, doc: dict, where: str) -> None:
    """Raise a ScenarioError naming the manifest, the field's path and the schema's rule."""
    errors = sorted(validator(kind).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ScenarioError(f"does not validate against the vendored {kind} schema: {e.message[:200]}",
                            Origin(where), field=path)
