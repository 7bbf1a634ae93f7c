#!/usr/bin/env python3
"""Every healthroute object in examples/ and in the docs' YAML blocks, read the way kubectl
reads it (YAML 1.1 with go-yaml's one-letter booleans, on PyYAML) and validated against the generated CRD schemas (crds/).

    python3 tests/tools/validate_manifests.py        # prints what it checked; exits 1 on a failure

Run by `cargo test -p healthroute-compiler --test manifests_as_kubectl_reads_them`. The CEL
rules are not evaluated here (the Rust loader runs them on the same files); the OpenAPI part
is, with `nullable` as the API server reads it. A doc block's `status` is left out: users
do not write it, and the docs abbreviate it."""
import glob
import os
import re
import sys

import jsonschema
import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


class KubectlLoader(yaml.SafeLoader):
    """PyYAML's YAML 1.1, plus the one-letter booleans kubectl's go-yaml also takes
    (y, Y, n, N): `setIdentifier: y` is `true` to the API server."""


KubectlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
_bool = yaml.constructor.SafeConstructor.construct_yaml_bool


def _construct_bool(loader, node):
    value = loader.construct_scalar(node)
    return value in "yY" if value in ("y", "Y", "n", "N") else _bool(loader, node)


KubectlLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


def load_all(text):
    return yaml.load_all(text, Loader=KubectlLoader)


def openapi_to_jsonschema(s):
    """`nullable: true` admits null; Kubernetes' extensions are left for jsonschema to ignore."""
    if isinstance(s, dict):
        out = {k: openapi_to_jsonschema(v) for k, v in s.items()}
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(s, list):
        return [openapi_to_jsonschema(v) for v in s]
    return s


def schemas():
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml"))):
        crd = yaml.safe_load(open(path))
        group = crd["spec"]["group"]
        for v in crd["spec"]["versions"]:
            schema = openapi_to_jsonschema(v["schema"]["openAPIV3Schema"])
            out[(f"{group}/{v['name']}", crd["spec"]["names"]["kind"])] = schema
    return out


def documents():
    """(where, object) for every healthroute object in examples and in the docs' YAML blocks."""
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.yaml"), recursive=True)):
        if os.path.basename(path) == "healthroute.yaml":
            continue
        for i, doc in enumerate(load_all(open(path).read()), 1):
            if doc:
                yield f"{os.path.relpath(path, ROOT)} (document {i})", doc, False
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")) + [os.path.join(ROOT, "README.md")]
                       + sorted(glob.glob(os.path.join(ROOT, "examples", "*", "README.md")))):
        text = open(path).read()
        for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.S), 1):
            for i, doc in enumerate(load_all(block), 1):
                if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                    yield f"{os.path.relpath(path, ROOT)} (yaml block {n}, document {i})", doc, True


def main():
    known = schemas()
    checked, failures = 0, []
    for where, doc, from_docs in documents():
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key not in known:
            if str(key[0]).startswith("healthroute.io"):
                failures.append(f"{where}: {key[0]} {key[1]} is not a served kind")
            continue
        if from_docs:
            doc = {k: v for k, v in doc.items() if k != "status"}
        validator = jsonschema.Draft7Validator(known[key])
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            field = ".".join(str(p) for p in error.absolute_path) or "(object)"
            failures.append(f"{where}: {key[1]} {doc.get('metadata', {}).get('name')}: {field}: {error.message}")
        checked += 1
    for f in failures:
        print(f"FAIL {f}")
    print(f"manifests as kubectl reads them: {checked} objects checked, {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
