"""Generate ``pi_sessiond/types.py`` from the protocol contract.

Usage (from ``clients/python``)::

    python -m pi_sessiond._generate > pi_sessiond/types.py

or with explicit contract files (for an installed package, outside the repository)::

    python -m pi_sessiond._generate --schema PATH/schema.json --methods PATH/methods.json

The input is ``protocol/schema.json`` (JSON Schema 2020-12, one ``$defs`` entry per params, result and
notification type) and ``protocol/methods.json`` (the method table). The output is a module of ``TypedDict``\\ s and
type aliases that runs on Python 3.9 (``typing.Optional``/``Union``/``List``, never ``X | Y``), plus the method
names, notification names and error codes of the contract. It is deterministic, so a test can regenerate it and
compare with the committed copy.

Only the standard library is used: the client has no dependencies, and neither does its build.
"""

import argparse
import json
import keyword
import os
import re
import sys
import textwrap
from typing import Any, Dict, List, Optional, Tuple

# Keywords that only annotate a schema; they never change the Python type.
_ANNOTATIONS = {
    "description",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
}
# Keywords the generator understands structurally. Anything else makes it fail rather than guess: a type that
# silently became ``Any`` would hide a contract change.
_STRUCTURE = {"type", "properties", "required", "items", "$ref", "anyOf", "oneOf", "allOf", "const", "enum",
              "additionalProperties"}

_WIDTH = 120

_PRIMITIVES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


def default_contract_dir() -> str:
    """The repository's ``protocol/`` folder, found from this file (``clients/python/pi_sessiond/``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir, "protocol"))


def _camel(word: str) -> str:
    """``"append"`` → ``"Append"``, ``"entries"`` → ``"Entries"``, ``"session_locked"`` → ``"SessionLocked"``."""
    parts = re.split(r"[^0-9A-Za-z]+", word)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def _wrap(text: str, indent: str, prefix: str = "") -> List[str]:
    # The schema's descriptions are written for 120 columns; keep the generated lines within that too.
    width = _WIDTH - len(indent) - len(prefix)
    out: List[str] = []
    for line in text.strip().splitlines() or [""]:
        out += textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""]
    return out


def _docstring(text: str, indent: str) -> List[str]:
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = _wrap(text, indent, '""""""')  # room for the quotes at both ends
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}'] + [f"{indent}{line}" if line else "" for line in lines[1:]] + [f'{indent}"""']


def _comment(text: str, indent: str) -> List[str]:
    # Sphinx reads ``#:`` comments as attribute documentation, and they need no runtime object.
    return [f"{indent}#: {line}".rstrip() for line in _wrap(text, indent, "#: ")]


class Generator:
    """Turns the ``$defs`` of one schema into Python source, one definition at a time."""

    def __init__(self, schema: Dict[str, Any], methods: Dict[str, Any]):
        self.defs: Dict[str, Any] = schema["$defs"]
        self.methods = methods
        # Emitted blocks, in order; nested inline objects are emitted before the definition that uses them.
        self.blocks: List[str] = []
        self.names: List[str] = []

    def type_of(self, schema: Any, hint: str) -> str:
        """The annotation for ``schema``; ``hint`` names any inline object that needs a class of its own."""
        if schema is True or schema == {}:
            return "Any"
        if not isinstance(schema, dict):
            raise ValueError(f"{hint}: unsupported schema {schema!r}")
        unknown = set(schema) - _ANNOTATIONS - _STRUCTURE
        if unknown:
            raise ValueError(f"{hint}: unsupported schema keywords {sorted(unknown)}")
        if "$ref" in schema:
            ref = schema["$ref"]
            prefix = "#/$defs/"
            if not ref.startswith(prefix) or ref[len(prefix):] not in self.defs:
                raise ValueError(f"{hint}: unresolvable $ref {ref}")
            # Quoted, so definitions may refer to each other in any order (and to themselves).
            return repr(ref[len(prefix):])
        if "const" in schema:
            return f"Literal[{schema['const']!r}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
        if "allOf" in schema:
            if len(schema["allOf"]) != 1:
                raise ValueError(f"{hint}: allOf with several members is not supported")
            return self.type_of(schema["allOf"][0], hint)
        for union in ("oneOf", "anyOf"):
            if union in schema:
                options = schema[union]
                non_null = [m for m in options if not (isinstance(m, dict) and m.get("type") == "null")]
                if len(non_null) == 1:
                    # "X or null": X keeps the plain name (SessionContextModel, not …Variant2).
                    members = [self.type_of(m, hint) for m in options]
                else:
                    members = [self.type_of(m, self._variant_name(hint, m, i)) for i, m in enumerate(options)]
                return self._union(members)
        types = schema.get("type")
        if types is None:
            if "properties" in schema:
                types = "object"
            else:
                # A description alone: any JSON value.
                return "Any"
        if isinstance(types, list):
            return self._union([self._single(schema, t, hint) for t in types])
        return self._single(schema, types, hint)

    def _variant_name(self, hint: str, member: Any, index: int) -> str:
        # A tagged union (`{kind: "append", ...}`) names its variants after the tag: ChangeAppend, ChangeLeaf…
        if isinstance(member, dict):
            for prop in ("kind", "type"):
                tag = member.get("properties", {}).get(prop, {})
                if isinstance(tag, dict) and isinstance(tag.get("const"), str):
                    return hint + _camel(tag["const"])
        return f"{hint}Variant{index + 1}"

    @staticmethod
    def _union(members: List[str]) -> str:
        unique: List[str] = []
        for m in members:
            if m not in unique:
                unique.append(m)
        if "Any" in unique:
            # Any absorbs everything, None included; keep the None visible anyway, it documents "or null".
            return "Optional[Any]" if "None" in unique else "Any"
        nullable = "None" in unique
        rest = [m for m in unique if m != "None"]
        if not rest:
            return "None"
        inner = rest[0] if len(rest) == 1 else "Union[" + ", ".join(rest) + "]"
        return f"Optional[{inner}]" if nullable else inner

    def _single(self, schema: Dict[str, Any], t: str, hint: str) -> str:
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t == "array":
            items = schema.get("items", True)
            return f"List[{self.type_of(items, hint + 'Item')}]"
        if t == "object":
            if "properties" in schema:
                self.emit_typed_dict(hint, schema)
                return repr(hint)
            extra = schema.get("additionalProperties", True)
            return f"Dict[str, {self.type_of(extra, hint + 'Value')}]"
        raise ValueError(f"{hint}: unsupported type {t!r}")

    def emit_typed_dict(self, name: str, schema: Dict[str, Any]) -> None:
        """Appends a TypedDict for an object schema (two classes when some members are optional)."""
        required = set(schema.get("required", []))
        props: Dict[str, Any] = schema["properties"]
        fields: List[Tuple[str, str, Optional[str]]] = []
        for prop in sorted(props, key=lambda p: (p not in required, p)):
            sub = props[prop]
            annotation = self.type_of(sub, name + _camel(prop))
            doc = sub.get("description") if isinstance(sub, dict) else None
            fields.append((prop, annotation, doc))
        req = [f for f in fields if f[0] in required]
        opt = [f for f in fields if f[0] not in required]
        doc = schema.get("description")
        lines: List[str] = []
        if any(not p.isidentifier() or keyword.iskeyword(p) for p, _, _ in fields):
            # Member names that are not identifiers need the functional syntax (and cannot be split by
            # requiredness on 3.9, so every member is optional).
            members = ", ".join(f"{p!r}: {a}" for p, a, _ in fields)
            lines.append(f"{name} = TypedDict({name!r}, {{{members}}}, total=False)")
            self.blocks.append("\n".join(lines))
            self.names.append(name)
            return

        def body(members: List[Tuple[str, str, Optional[str]]], with_doc: bool) -> List[str]:
            out: List[str] = []
            if with_doc and doc:
                out += _docstring(doc, "    ")
                if members:
                    out.append("")
            for p, a, d in members:
                if d:
                    out += _comment(d, "    ")
                out.append(f"    {p}: {a}")
            if not out:
                out.append("    pass")
            return out

        if req and opt:
            # Python 3.9 has no NotRequired: required members go in a total base, optional ones in a
            # total=False subclass.
            base = f"_{name}Required"
            lines.append(f"class {base}(TypedDict):")
            lines += body(req, False)
            lines += ["", ""]
            lines.append(f"class {name}({base}, total=False):")
            lines += body(opt, True)
        elif opt:
            lines.append(f"class {name}(TypedDict, total=False):")
            lines += body(opt, True)
        else:
            lines.append(f"class {name}(TypedDict):")
            lines += body(req, True)
        self.blocks.append("\n".join(lines))
        self.names.append(name)

    def emit_def(self, name: str, schema: Dict[str, Any]) -> None:
        """One ``$defs`` entry: a TypedDict for an object with members, a type alias for anything else."""
        is_object = isinstance(schema, dict) and "properties" in schema and schema.get("type", "object") == "object"
        if is_object:
            self.emit_typed_dict(name, schema)
            return
        annotation = self.type_of(schema, name)
        lines: List[str] = []
        if isinstance(schema, dict) and schema.get("description"):
            lines += _comment(schema["description"], "")
        lines.append(f"{name} = {annotation}")
        self.blocks.append("\n".join(lines))
        self.names.append(name)

    def source(self) -> str:
        """The whole module."""
        for name in sorted(self.defs):
            self.emit_def(name, self.defs[name])
        requests = sorted(m["name"] for m in self.methods["methods"] if m["kind"] == "request")
        server_notes = sorted(
            m["name"] for m in self.methods["methods"]
            if m["kind"] == "notification" and m["direction"] == "server-to-client"
        )
        errors = sorted((e["code"], e["kind"]) for e in self.methods["errors"])
        head = [
            '"""Types of the pi-sessiond protocol, generated from protocol/schema.json and protocol/methods.json.',
            "",
            "Do not edit: regenerate with ``python -m pi_sessiond._generate > pi_sessiond/types.py`` (from",
            "``clients/python``). Results and notifications are plain dicts; these TypedDicts describe them for type",
            "checkers and readers. Entries keep members these types do not list (pi's entries are open-ended).",
            '"""',
            "",
            "from typing import Any, Dict, List, Literal, Optional, TypedDict, Union",
            "",
            f"PROTOCOL_VERSION = {self.methods['protocolVersion']!r}",
            '"""The protocol version of the contract these types were generated from."""',
            "",
            "REQUEST_METHODS = (",
            *[f"    {n!r}," for n in requests],
            ")",
            '"""Every request method of the contract."""',
            "",
            "SERVER_NOTIFICATIONS = (",
            *[f"    {n!r}," for n in server_notes],
            ")",
            '"""Every notification the contract says the server sends."""',
            "",
            "ERROR_KINDS = {",
            *[f"    {c}: {k!r}," for c, k in errors],
            "}",
            '"""Error code → ``data.kind``, as the contract lists them."""',
        ]
        return "\n".join(head) + "\n\n\n" + "\n\n\n".join(self.blocks) + "\n"


def generate(schema_path: str, methods_path: str) -> str:
    """The source of ``types.py`` for the given contract files."""
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    with open(methods_path, encoding="utf-8") as f:
        methods = json.load(f)
    return Generator(schema, methods).source()


def main(argv: Optional[List[str]] = None) -> int:
    """Command line: print the module to stdout (or write it with ``--output``)."""
    contract = default_contract_dir()
    parser = argparse.ArgumentParser(prog="python -m pi_sessiond._generate", description=__doc__.splitlines()[0])
    parser.add_argument("--schema", default=os.path.join(contract, "schema.json"), help="protocol/schema.json")
    parser.add_argument("--methods", default=os.path.join(contract, "methods.json"), help="protocol/methods.json")
    parser.add_argument("--output", help="write here instead of stdout")
    args = parser.parse_args(argv)
    for path in (args.schema, args.methods):
        if not os.path.isfile(path):
            parser.error(f"{path} not found: pass --schema and --methods (the repository's protocol/ folder)")
    text = generate(args.schema, args.methods)
    if args.output:
        # newline="\n": the committed file has LF endings on every platform.
        with open(args.output, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
