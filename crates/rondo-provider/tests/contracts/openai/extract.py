#!/usr/bin/env python3
"""Cut openapi.yaml (next to this script) out of OpenAI's published OpenAPI document.

Keeps, as lines copied unchanged from the upstream file, what the provider tests read:
`components.schemas.CreateChatCompletionRequest` with every schema its `$ref`s reach, and
the examples of `POST /chat/completions` (`x-oaiMeta.examples`). It then parses both files
and fails unless every kept node equals the upstream one.

    python3 extract.py                       # downloads the pinned commit
    python3 extract.py path/to/openapi.yaml  # a copy of it (checked by sha256)

Needs PyYAML.
"""

import hashlib
import sys
import urllib.request
from pathlib import Path

import yaml

COMMIT = "f85dbe223d40e1a31cba812ab2d755c7e98a92a3"
URL = f"https://raw.githubusercontent.com/openai/openai-openapi/{COMMIT}/openapi.yaml"
SHA256 = "db5d7478feae10b4d331834c60d9765a8aa042e38419f9b1694288c11aa8ebc8"
ROOT_SCHEMA = "CreateChatCompletionRequest"
SCHEMA_REF = "#/components/schemas/"
OUT = Path(__file__).with_name("openapi.yaml")

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_upstream() -> str:
    if len(sys.argv) > 1:
        data = Path(sys.argv[1]).read_bytes()
    else:
        with urllib.request.urlopen(URL, timeout=120) as reply:
            data = reply.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        sys.exit(f"the spec's sha256 is {digest}, not {SHA256} (commit {COMMIT})")
    return data.decode("utf-8")


def refs_in(node) -> set:
    found, stack = set(), [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    found.add(value)
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def reached_schemas(spec: dict) -> set:
    schemas = spec["components"]["schemas"]
    seen, todo = set(), [ROOT_SCHEMA]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for ref in refs_in(schemas[name]):
            target = ref.removeprefix(SCHEMA_REF)
            if target == ref or "/" in target:
                sys.exit(f"{name}: a $ref this script does not follow: {ref}")
            todo.append(target)
    return seen


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def block_end(lines: list, start: int) -> int:
    """One past the last line of the node whose key is on line `start`."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or indent(lines[end]) > indent(lines[start])):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def children(lines: list, parent: int | None) -> dict:
    """The keys one level (two spaces) under the key on line `parent` (None: the top level)."""
    if parent is None:
        first, end, level = 0, len(lines), 0
    else:
        first, end, level = parent + 1, block_end(lines, parent), indent(lines[parent]) + 2
    keys = {}
    for i in range(first, end):
        line = lines[i]
        if line.strip() and indent(line) == level and not line.lstrip().startswith(("#", "- ")):
            keys[line.strip().split(":", 1)[0]] = i
    return keys


def at(lines: list, path: list) -> int:
    line = None
    for key in path:
        line = children(lines, line)[key]
    return line


def main() -> None:
    text = read_upstream()
    spec = yaml.load(text, Loader=Loader)
    lines = text.split("\n")
    names = reached_schemas(spec)

    def node(path: list) -> list:
        start = at(lines, path)
        return lines[start : block_end(lines, start)]

    out = [
        f"# Cut from OpenAI's OpenAPI document: openai/openai-openapi, commit {COMMIT},",
        f"# openapi.yaml (sha256 {SHA256}), by extract.py in this folder.",
        "# Licence: MIT, LICENSE in this folder. The lines below are copied unchanged.",
        *node(["openapi"]),
        *node(["info"]),
        "paths:",
        "  /chat/completions:",
        "    post:",
        "      x-oaiMeta:",
        *node(["paths", "/chat/completions", "post", "x-oaiMeta", "examples"]),
        "components:",
        "  schemas:",
    ]
    for name, line in children(lines, at(lines, ["components", "schemas"])).items():
        if name in names:
            out += lines[line : block_end(lines, line)]
    OUT.write_text("\n".join(out) + "\n")

    kept = yaml.load(OUT.read_text(), Loader=Loader)
    assert kept["openapi"] == spec["openapi"] and kept["info"] == spec["info"]
    assert set(kept["components"]["schemas"]) == names, "a schema was not found by its line"
    for name in names:
        assert kept["components"]["schemas"][name] == spec["components"]["schemas"][name], name
    examples = spec["paths"]["/chat/completions"]["post"]["x-oaiMeta"]["examples"]
    assert kept["paths"]["/chat/completions"]["post"]["x-oaiMeta"]["examples"] == examples
    print(f"{OUT}: {len(names)} schemas, {len(examples)} examples, {len(out)} lines")


if __name__ == "__main__":
    main()
