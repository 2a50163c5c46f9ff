"""Writes deployments/engine/flags/vllm-<version>.json: every `vllm serve` flag of one version.

    python scripts/vllm_flags.py 0.16.0 0.32.0 [--wheels DIR]

The wheel is fetched with `pip download --no-deps vllm==X` (kept in DIR, default
/tmp/vllm-wheels, so a second run does not download again). The Python sources inside it are read
with `ast`: nothing from vLLM is imported or run, so neither torch nor a GPU is needed, and a
hostile wheel could not run code here. The flag list is rebuilt the way vLLM builds its parser
(reference/vllm.md §1.3): `make_arg_parser` adds a few flags of its own, then
`FrontendArgs.add_cli_args` and `AsyncEngineArgs.add_cli_args`, whose groups take their types,
defaults and help from the config dataclasses (`get_kwargs(ModelConfig)` and so on). The tool-call
and reasoning parser names come from their registries, the quantization methods from their
`Literal`.

Not part of the running console: the JSON it writes is committed, never typed by hand.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "deployments" / "engine" / "flags"
CLI_ARGS = ("vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/launchers/cli_args.py")
ARG_UTILS = "vllm/engine/arg_utils.py"
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"
OLD_TOOL_PARSERS = "vllm/entrypoints/openai/tool_parsers/__init__.py"
REASONING = "vllm/reasoning/__init__.py"
QUANTIZATION = "vllm/model_executor/layers/quantization/__init__.py"
UNKNOWN = object()  # a default that is computed at run time, not written in the source


# --- the wheel's sources ---------------------------------------------------------------------


def wheel_path(version: str, folder: Path) -> Path:
    """The wheel of `version`, downloaded once into `folder`."""
    found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}"]
        subprocess.run([*command, "-d", str(folder)], check=True)
        found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no wheel for vllm=={version}")
    return found[0]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Sources:
    """The parsed Python modules of a wheel, by path, with indexes of classes and constants."""

    def __init__(self, wheel: Path) -> None:
        with zipfile.ZipFile(wheel) as archive:
            self.text = {
                name: archive.read(name).decode("utf-8", "replace")
                for name in archive.namelist()
                if name.startswith("vllm/") and name.endswith(".py") and "/tests/" not in name
            }
        self.trees: dict[str, ast.Module] = {}
        self.imports: dict[str, dict[str, str]] = {}
        self.classes: dict[str, list[tuple[str, ast.ClassDef]]] = {}
        for path in sorted(self.text):
            if path.startswith("vllm/config/") or path in CLI_ARGS or path == ARG_UTILS:
                self._index(path)

    def tree(self, path: str) -> ast.Module | None:
        if path not in self.trees and path in self.text:
            try:
                self.trees[path] = ast.parse(self.text[path])
            except SyntaxError:
                return None
        return self.trees.get(path)

    def _index(self, path: str) -> None:
        tree = self.tree(path)
        for node in tree.body if tree else ():
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, []).append((path, node))

    def module_path(self, dotted: str) -> str | None:
        for candidate in (
            dotted.replace(".", "/") + ".py",
            dotted.replace(".", "/") + "/__init__.py",
        ):
            if candidate in self.text:
                return candidate
        return None

    def imported_from(self, path: str, name: str) -> str | None:
        """The module `name` is imported from in `path` (`from x.y import name`)."""
        if path not in self.imports:
            self.imports[path] = self._imports(path)
        module = self.imports[path].get(name)
        return self.module_path(module) if module else None

    def _imports(self, path: str) -> dict[str, str]:
        found: dict[str, str] = {}
        tree = self.tree(path)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    found.setdefault(alias.asname or alias.name, node.module)
        return found

    def find_class(self, name: str, near: str) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from module `near`: its own, an import, or the only one."""
        for path in (near, self.imported_from(near, name)):
            if path and path not in self.trees:
                self._index(path)
            for where, node in self.classes.get(name, []):
                if where == path:
                    return where, node
        if name not in self.classes:
            self._index_everything()
        found = self.classes.get(name, [])
        return found[0] if found else None

    def _index_everything(self) -> None:
        for path in sorted(self.text):
            if path not in self.trees:
                self._index(path)

    def constant(self, name: str, near: str, depth: int = 0) -> tuple[str, ast.expr] | None:
        """The value a module-level name is assigned, following one chain of imports."""
        tree = self.tree(near)
        for node in tree.body if tree else ():
            target = assigned_name(node)
            if target == name and node.value is not None:  # type: ignore[attr-defined]
                return near, node.value  # type: ignore[attr-defined]
        source = self.imported_from(near, name)
        if source and depth < 4:
            return self.constant(name, source, depth + 1)
        return None


def assigned_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    alias = getattr(ast, "TypeAlias", None)  # `type X = …` (Python 3.12)
    if alias is not None and isinstance(node, alias) and isinstance(node.name, ast.Name):
        return node.name.id
    return None


# --- types and defaults, as vLLM's get_kwargs derives them -----------------------------------


@dataclass
class FlagType:
    kind: str = "str"  # bool | int | float | str | choice | json
    choices: list[str] = field(default_factory=list)
    nullable: bool = False
    multiple: bool = False


def union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return union_members(node.left) + union_members(node.right)
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Optional", "typing.Optional"):
        return [node.slice, ast.Constant(None)]
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Union", "typing.Union"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [member for item in items for member in union_members(item)]
    if isinstance(node, ast.Subscript) and dotted(node.value).split(".")[-1] == "SkipValidation":
        return union_members(node.slice)
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Annotated", "typing.Annotated"):
        first = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
        return union_members(first)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return union_members(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return [node]
    return [node]


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


class Typer:
    """Reads an annotation the way vLLM's get_kwargs reads a field's type hints."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def of(self, annotation: ast.expr, path: str) -> FlagType:
        members = self.expand(annotation, path, 0)
        result = FlagType(nullable=any(is_none(m) for m, _ in members))
        names = [self.base_name(m) for m, _ in members if not is_none(m)]
        literals = [lit for m, p in members for lit in self.literals(m, p, 0)]
        if any(self.is_config_class(m, p) for m, p in members):
            result.kind = "json"
        elif sorted(names) == ["bool", "str"] and result.nullable:
            # get_kwargs: `bool | str | None` is an optional-valued string (`--hf-token [TOKEN]`,
            # nargs="?", const=True), not a switch: there is no --no-hf-token (vllm --help=all).
            result.kind = "str"
        elif "bool" in names:
            result.kind = "bool"
        elif literals:
            result.kind, result.choices = "choice", [str(v) for v in literals]
        elif any(n in ("list", "tuple", "set", "Sequence") for n in names):
            result.multiple = True
            inner = self.collection_item(members)
            result.kind, result.choices = inner.kind, inner.choices
        elif "int" in names:
            result.kind = "int"
        elif "float" in names:
            result.kind = "float"
        elif "dict" in names or "Mapping" in names:
            result.kind = "json"
        return result

    def expand(self, node: ast.expr, path: str, depth: int) -> list[tuple[ast.expr, str]]:
        """Union members, with type aliases (`CacheDType = Literal[...]`) replaced by values."""
        out: list[tuple[ast.expr, str]] = []
        for member in union_members(node):
            alias = self.alias(member, path) if depth < 5 else None
            if alias is not None:
                out += self.expand(alias[1], alias[0], depth + 1)
            else:
                out.append((member, path))
        return out

    def alias(self, node: ast.expr, path: str) -> tuple[str, ast.expr] | None:
        if not isinstance(node, ast.Name) or node.id in BUILTIN_TYPES:
            return None
        found = self.sources.constant(node.id, path)
        if found and isinstance(found[1], ast.Subscript | ast.BinOp | ast.Name):
            return found
        return None

    def literals(self, node: ast.expr, path: str, depth: int) -> list[Any]:
        """`Literal["auto", RunnerType]`: the values, with nested aliases spelled out."""
        if not (isinstance(node, ast.Subscript) and dotted(node.value).endswith("Literal")):
            return []
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        values: list[Any] = []
        for item in items:
            if isinstance(item, ast.Constant):
                values.append(item.value)
                continue
            alias = self.alias(item, path) if depth < 5 else None
            if alias is not None:
                for member, where in self.expand(alias[1], alias[0], depth + 1):
                    values += self.literals(member, where, depth + 1)
        return values

    @staticmethod
    def base_name(node: ast.expr) -> str:
        target = node.value if isinstance(node, ast.Subscript) else node
        return dotted(target).split(".")[-1]

    def is_config_class(self, node: ast.expr, path: str) -> bool:
        """A dataclass-typed field is passed as JSON (get_kwargs: `parse_dataclass`)."""
        name = dotted(node).split(".")[-1]
        if not name or name in BUILTIN_TYPES or isinstance(node, ast.Subscript):
            return False
        found = self.sources.find_class(name, path)
        return bool(found and is_dataclass(found[1]))

    def collection_item(self, members: list[tuple[ast.expr, str]]) -> FlagType:
        for member, path in members:
            if isinstance(member, ast.Subscript):
                inner = (
                    member.slice.elts[0] if isinstance(member.slice, ast.Tuple) else member.slice
                )
                return self.of(inner, path)
        return FlagType()


BUILTIN_TYPES = {"int", "float", "str", "bool", "list", "dict", "tuple", "set", "None", "Any"}


def is_none(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or dotted(node) == "None"


def literal_values(node: ast.expr) -> list[Any]:
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Literal", "typing.Literal"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [item.value for item in items if isinstance(item, ast.Constant)]
    return []


def is_dataclass(node: ast.ClassDef) -> bool:
    names = {
        dotted(d.func if isinstance(d, ast.Call) else d).split(".")[-1] for d in node.decorator_list
    }
    return bool(names & {"config", "dataclass"})


class Defaults:
    """A field's default from its source: a literal, a constant, a factory, or unknown."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def of(
        self,
        value: ast.expr | None,
        path: str,
        depth: int = 0,
        scope: dict[str, ast.expr] | None = None,
    ) -> Any:
        if value is None:
            return UNKNOWN
        if isinstance(value, ast.Call):
            return self.call(value, path, depth, scope)
        try:
            return ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(value, ast.Name) and scope and value.id in scope and depth < 4:
            return self.of(scope[value.id], path, depth + 1)  # a class constant (ClassVar)
        if isinstance(value, ast.Name) and depth < 4:
            found = self.sources.constant(value.id, path)
            return self.of(found[1], found[0], depth + 1) if found else UNKNOWN
        if isinstance(value, ast.Attribute) and depth < 4:
            return self.attribute(value, path, depth)
        return UNKNOWN

    def call(self, call: ast.Call, path: str, depth: int, scope: dict[str, ast.expr] | None) -> Any:
        """`field(default=…)`, `Field(default_factory=list)`, `field(default_factory=lambda: …)`."""
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if "default" in keywords:
            return self.of(keywords["default"], path, depth + 1, scope)
        factory = keywords.get("default_factory")
        if factory is not None:
            if isinstance(factory, ast.Lambda):
                return self.of(factory.body, path, depth + 1)
            if dotted(factory) in ("list", "dict", "set", "tuple"):
                return {"list": [], "dict": {}, "set": [], "tuple": []}[dotted(factory)]
            return UNKNOWN
        if call.args and dotted(call.func).split(".")[-1] in ("field", "Field"):
            return self.of(call.args[0], path, depth + 1, scope)
        return UNKNOWN

    def attribute(self, node: ast.Attribute, path: str, depth: int) -> Any:
        """`CacheConfig.block_size` (an EngineArgs default pointing at a config field)."""
        owner = dotted(node.value).split(".")[-1]
        found = self.sources.find_class(owner, path) if owner else None
        if not found:
            return UNKNOWN
        for statement in found[1].body:
            if isinstance(statement, ast.AnnAssign) and assigned_name(statement) == node.attr:
                return self.of(statement.value, found[0], depth + 1)
        return UNKNOWN


# --- config dataclass fields -----------------------------------------------------------------


@dataclass
class FieldInfo:
    name: str
    type: FlagType
    default: Any
    help: str


class Fields:
    """The fields of a config dataclass (bases first), with their attribute docstrings."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.typer = Typer(sources)
        self.defaults = Defaults(sources)
        self.cache: dict[str, dict[str, FieldInfo]] = {}

    def of(self, class_name: str, near: str) -> dict[str, FieldInfo]:
        key = f"{near}:{class_name}"
        if key not in self.cache:
            self.cache[key] = self._read(class_name, near, 0)
        return self.cache[key]

    def _read(self, class_name: str, near: str, depth: int) -> dict[str, FieldInfo]:
        found = self.sources.find_class(class_name, near)
        if not found or depth > 6:
            return {}
        path, node = found
        result: dict[str, FieldInfo] = {}
        for base in node.bases:
            name = dotted(base).split(".")[-1]
            if name and name not in ("object", "Generic", "Protocol"):
                result.update(self._read(name, path, depth + 1))
        result.update(self._own(path, node))
        return result

    def _own(self, path: str, node: ast.ClassDef) -> dict[str, FieldInfo]:
        result: dict[str, FieldInfo] = {}
        body = node.body
        scope: dict[str, ast.expr] = {}
        for statement in body:
            name = assigned_name(statement)
            value = getattr(statement, "value", None)
            if name and isinstance(value, ast.expr):
                scope[name] = value
        for position, statement in enumerate(body):
            if not isinstance(statement, ast.AnnAssign) or not isinstance(
                statement.target, ast.Name
            ):
                continue
            if dotted(statement.annotation).split(".")[-1] in ("ClassVar", "InitVar") or (
                isinstance(statement.annotation, ast.Subscript)
                and dotted(statement.annotation.value).split(".")[-1] in ("ClassVar", "InitVar")
            ):
                continue
            name = statement.target.id
            result[name] = FieldInfo(
                name=name,
                type=self.typer.of(statement.annotation, path),
                default=self.defaults.of(statement.value, path, scope=scope),
                help=docstring_after(body, position),
            )
        return result


def docstring_after(body: list[ast.stmt], position: int) -> str:
    if position + 1 < len(body):
        following = body[position + 1]
        if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            if isinstance(following.value.value, str):
                return clean_help(following.value.value)
    return ""


def clean_help(text: str) -> str:
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paragraphs if p)


# --- walking the add_cli_args functions ------------------------------------------------------


@dataclass
class Flag:
    name: str
    options: list[str]
    group: str
    type: FlagType
    default: Any
    help: str
    field_default: Any = UNKNOWN

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "flags": self.options,
            "group": self.group,
            "type": self.type.kind,
            "nullable": self.type.nullable,
            "multiple": self.type.multiple,
            "choices": self.type.choices or None,
            "default": json_default(self.default),
            "help": self.help,
        }
        if self.field_default is not UNKNOWN and self.field_default != self.default:
            data["field_default"] = json_default(self.field_default)
        if self.default is UNKNOWN:
            data["default_computed"] = True
        if self.type.kind == "bool":
            data["negatable"] = any(o.startswith("--no-") for o in self.options)
        return data


def json_default(value: Any) -> Any:
    if value is UNKNOWN:
        return None
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


@dataclass
class Walk:
    """What the interpreter tracks while reading one add_cli_args body."""

    path: str
    owner: str  # the class whose add_cli_args this is (for `get_kwargs(cls)`)
    kwargs: dict[str, dict[str, FieldInfo]] = field(default_factory=dict)
    single: dict[str, FieldInfo] = field(default_factory=dict)
    overrides: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    customizing: bool = False  # inside _customize_cli_kwargs: its super() call is not followed


class Reader:
    """Rebuilds `vllm serve`'s flags by reading make_arg_parser and the add_cli_args it calls."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.fields = Fields(sources)
        self.flags: dict[str, Flag] = {}
        self.seen_methods: set[str] = set()

    def read(self) -> list[Flag]:
        path = next((p for p in CLI_ARGS if p in self.sources.text), None)
        if path is None:
            raise SystemExit("this wheel has no entrypoints/*/cli_args.py")
        function = find_function(self.sources.tree(path), "make_arg_parser")
        if function is None:
            raise SystemExit(f"{path} has no make_arg_parser")
        self.body(function.body, Walk(path=path, owner=""), "Serve")
        return list(self.flags.values())

    def body(self, statements: list[ast.stmt], walk: Walk, group: str) -> None:
        for statement in statements:
            self.statement(statement, walk, group)

    def statement(self, node: ast.stmt, walk: Walk, group: str) -> None:
        if isinstance(node, ast.If | ast.With | ast.Try):
            self.body(node.body, walk, group)
            if isinstance(node, ast.If):
                self.body(node.orelse, walk, group)
        elif isinstance(node, ast.For):
            self.loop(node, walk)
        elif isinstance(node, ast.Assign):
            self.assign(node, walk)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.call(node.value, walk, group)

    def assign(self, node: ast.Assign, walk: Walk) -> None:
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Subscript):
            self.override(target, value, walk)
            return
        if not isinstance(target, ast.Name):
            return
        if isinstance(value, ast.Call):
            self.assign_call(target.id, value, walk)
        elif isinstance(value, ast.Subscript) and isinstance(value.value, ast.Call):
            fields = self.kwargs_of(value.value, walk)
            key = subscript_key(value)
            if fields is not None and key in fields:
                walk.single[target.id] = fields[key]

    def assign_call(self, name: str, call: ast.Call, walk: Walk) -> None:
        function = dotted(call.func)
        fields = self.kwargs_of(call, walk)
        if fields is not None:
            walk.kwargs[name] = fields
        elif function.endswith("add_argument_group"):
            keywords = {k.arg: k.value for k in call.keywords}
            title = keywords.get("title") or (call.args[0] if call.args else None)
            if isinstance(title, ast.Constant):
                walk.groups[name] = str(title.value)
            elif isinstance(title, ast.Name) and title.id == "group_name":
                walk.groups[name] = walk.owner.replace("Args", "")
        elif function.endswith("add_cli_args") and call.args:
            self.class_method(function.split(".")[0], walk)
        elif function.endswith("_customize_cli_kwargs") and call.args and not walk.customizing:
            self.customize(walk, call)

    def kwargs_of(self, call: ast.Call, walk: Walk) -> dict[str, FieldInfo] | None:
        if dotted(call.func).split(".")[-1] != "get_kwargs" or not call.args:
            return None
        name = dotted(call.args[0])
        if name == "cls":
            name = walk.owner
        return self.fields.of(name, walk.path)

    def override(self, target: ast.Subscript, value: ast.expr, walk: Walk) -> None:
        """`frontend_kwargs["x"]["default"] = …` changes what a later add_argument passes."""
        inner = target.value
        if not isinstance(inner, ast.Subscript) or not isinstance(inner.value, ast.Name):
            return
        key, setting = subscript_key(inner), subscript_key(target)
        if key and setting:
            walk.overrides.setdefault((inner.value.id, key), {})[setting] = value

    def customize(self, walk: Walk, call: ast.Call) -> None:
        """`cls._customize_cli_kwargs(kwargs)`: read the overrides of every class in the chain."""
        variable = dotted(call.args[0])
        for path, cls in self.chain(walk.owner, walk.path):
            method = find_method(cls, "_customize_cli_kwargs")
            if method is None or not method.args.args:
                continue
            parameter = method.args.args[-1].arg
            sub = Walk(path=path, owner=walk.owner, customizing=True)
            self.body(method.body, sub, "")
            for (var, key), values in sub.overrides.items():
                if var == parameter:
                    walk.overrides.setdefault((variable, key), {}).update(values)

    def chain(self, class_name: str, near: str) -> list[tuple[str, ast.ClassDef]]:
        """The class and its bases, most basic first."""
        found = self.sources.find_class(class_name, near)
        if not found:
            return []
        path, node = found
        bases = [dotted(b).split(".")[-1] for b in node.bases]
        result: list[tuple[str, ast.ClassDef]] = []
        for base in bases:
            result += self.chain(base, path)
        return [*result, found]

    def class_method(self, class_name: str, walk: Walk) -> None:
        """`FrontendArgs.add_cli_args(parser)`: read that method (or the one it inherits)."""
        for path, cls in reversed(self.chain(class_name, walk.path)):
            method = find_method(cls, "add_cli_args")
            if method is None:
                continue
            key = f"{class_name}:{path}:{cls.name}"
            if key in self.seen_methods:
                return
            self.seen_methods.add(key)
            self.body(method.body, Walk(path=path, owner=class_name), "")
            return

    def loop(self, node: ast.For, walk: Walk) -> None:
        """`for key, value in frontend_kwargs.items(): group.add_argument(f"--{key…}", **value)`."""
        iterated = node.iter
        if not (isinstance(iterated, ast.Call) and dotted(iterated.func).endswith(".items")):
            return
        variable = dotted(iterated.func)[: -len(".items")]
        fields = walk.kwargs.get(variable)
        adds = [c for c in ast.walk(node) if isinstance(c, ast.Call) and is_add_argument(c)]
        if fields is None or not adds:
            return
        group = walk.groups.get(dotted(adds[0].func).rsplit(".", 1)[0], walk.owner)
        for key, info in fields.items():
            overrides = walk.overrides.get((variable, key), {})
            extra = self.literal(overrides.get("flags"), walk) or []
            options = [*extra, "--" + key.replace("_", "-")]
            self.add(key, options, group, info, overrides, walk)

    def call(self, call: ast.Call, walk: Walk, group: str) -> None:
        function = dotted(call.func)
        if function.endswith("add_cli_args") and call.args:
            self.class_method(function.split(".")[0], walk)
        elif is_add_argument(call):
            self.add_argument(call, walk, group)

    def add_argument(self, call: ast.Call, walk: Walk, group: str) -> None:
        options = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if not options or not all(isinstance(o, str) for o in options):
            return
        group = walk.groups.get(dotted(call.func).rsplit(".", 1)[0], group or "Serve")
        info, explicit = self.spread(call, walk)
        if any(k.arg == "dest" for k in call.keywords):
            dest = self.literal(next(k.value for k in call.keywords if k.arg == "dest"), walk)
        else:
            longest = next((o for o in options if o.startswith("--")), options[0])
            dest = longest.lstrip("-").replace("-", "_")
        self.add(str(dest), list(options), group, info, explicit, walk)

    def spread(self, call: ast.Call, walk: Walk) -> tuple[FieldInfo | None, dict[str, Any]]:
        """The field behind `**kwargs["x"]` (or `**{**kwargs["x"], "default": None}`), and the
        keyword arguments written out beside it."""
        info: FieldInfo | None = None
        explicit: dict[str, Any] = {}
        for keyword in call.keywords:
            if keyword.arg is not None:
                explicit[keyword.arg] = keyword.value
                continue
            value = keyword.value
            if isinstance(value, ast.Dict):
                for key, item in zip(value.keys, value.values, strict=True):
                    if key is None:
                        info, more = self.spread_source(item, walk)
                        explicit.update(more)
                    elif isinstance(key, ast.Constant):
                        explicit[str(key.value)] = item
            else:
                info, more = self.spread_source(value, walk)
                explicit = {**more, **explicit}
        return info, explicit

    def spread_source(self, node: ast.expr, walk: Walk) -> tuple[FieldInfo | None, dict[str, Any]]:
        if isinstance(node, ast.Name) and node.id in walk.single:
            return walk.single[node.id], dict(walk.overrides.get((node.id, ""), {}))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            key = subscript_key(node)
            fields = walk.kwargs.get(node.value.id, {})
            overrides = walk.overrides.get((node.value.id, key or ""), {})
            return fields.get(key or ""), dict(overrides)
        return None, {}

    def add(
        self,
        dest: str,
        options: list[str],
        group: str,
        info: FieldInfo | None,
        explicit: dict[str, Any],
        walk: Walk,
    ) -> None:
        flag_type = self.flag_type(info, explicit, walk)
        field_default = info.default if info else UNKNOWN
        default = field_default
        if "default" in explicit:
            default = self.literal(explicit["default"], walk, UNKNOWN)
        help_text = info.help if info else ""
        if "help" in explicit:
            help_text = clean_help(str(self.literal(explicit["help"], walk, "") or help_text))
        if flag_type.kind == "bool" and "type" not in explicit and self.negatable(explicit, info):
            options = [*options, *("--no-" + o[2:] for o in options if o.startswith("--"))]
        if options and not options[0].startswith("-"):
            options = [dest]  # the positional model tag
        self.flags[dest] = Flag(dest, options, group, flag_type, default, help_text, field_default)

    def flag_type(self, info: FieldInfo | None, explicit: dict[str, Any], walk: Walk) -> FlagType:
        result = FlagType(**vars(info.type)) if info else FlagType()
        action = self.literal(explicit.get("action"), walk) or dotted(
            explicit.get("action") or ast.Name("")
        )
        if action in ("store_true", "store_false") or str(action).endswith("BooleanOptionalAction"):
            result.kind = "bool"
        elif action == "append":
            result.multiple = True
        kind = dotted(explicit["type"]) if "type" in explicit else ""
        if kind and result.kind == "bool" and "action" not in explicit:
            result.kind = "str"  # `type=str, nargs="?", const=True` (--hf-token): not a switch
        if kind in ("int", "float", "str"):
            result.kind = kind
        elif kind.endswith("json.loads") or kind == "json.loads":
            result.kind = "json"
        elif "human_readable_int" in kind:
            result.kind = "int"
        choices = self.literal(explicit.get("choices"), walk)
        if isinstance(choices, list | tuple) and choices:
            result.kind, result.choices = "choice", [str(c) for c in choices]
        if "nargs" in explicit and self.literal(explicit["nargs"], walk) in ("+", "*"):
            result.multiple = True
        return result

    def negatable(self, explicit: dict[str, Any], info: FieldInfo | None) -> bool:
        """get_kwargs gives every bool field BooleanOptionalAction (`--x` and `--no-x`)."""
        action = explicit.get("action")
        if action is not None:
            return dotted(action).endswith("BooleanOptionalAction")
        return info is not None and info.type.kind == "bool"

    def literal(self, node: Any, walk: Walk, fallback: Any = None) -> Any:
        if node is None:
            return fallback
        value = Defaults(self.sources).of(node, walk.path)
        if value is UNKNOWN and isinstance(node, ast.JoinedStr | ast.BinOp):
            return fallback
        return fallback if value is UNKNOWN else value


def find_function(tree: ast.Module | None, name: str) -> ast.FunctionDef | None:
    for node in tree.body if tree else ():
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def find_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def subscript_key(node: ast.Subscript) -> str | None:
    index = node.slice
    return str(index.value) if isinstance(index, ast.Constant) else None


def is_add_argument(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"


# --- registries ------------------------------------------------------------------------------


def registered_names(sources: Sources, path: str, table: str, manager: str) -> list[str]:
    """Names in `_X_TO_REGISTER = {...}` plus those of `@Manager.register_module("name")`."""
    names: list[str] = []
    tree = sources.tree(path)
    for node in tree.body if tree else ():
        if assigned_name(node) == table and isinstance(node.value, ast.Dict):  # type: ignore[attr-defined]
            names += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]  # type: ignore[attr-defined]
    folder = path.rsplit("/", 1)[0] + "/"
    for module in sorted(p for p in sources.text if p.startswith(folder)):
        if f"{manager}.register_module" not in sources.text[module]:
            continue
        for node in ast.walk(sources.tree(module) or ast.Module(body=[], type_ignores=[])):
            if isinstance(node, ast.Call) and dotted(node.func).endswith(
                f"{manager}.register_module"
            ):
                for argument in node.args:
                    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                        names.append(argument.value)
                    elif isinstance(argument, ast.List | ast.Tuple):
                        names += [e.value for e in argument.elts if isinstance(e, ast.Constant)]
    return sorted(set(names))


def quantization_methods(sources: Sources) -> list[str]:
    found = sources.constant("QuantizationMethods", QUANTIZATION)
    return sorted(str(v) for v in literal_values(found[1])) if found else []


# --- output ----------------------------------------------------------------------------------


def flag_list(version: str, wheel: Path) -> dict[str, Any]:
    sources = Sources(wheel)
    flags = Reader(sources).read()
    tool_path = TOOL_PARSERS if TOOL_PARSERS in sources.text else OLD_TOOL_PARSERS
    return {
        "engine": "vllm",
        "version": version,
        "generated_by": "scripts/vllm_flags.py (ast over the wheel's sources; nothing imported)",
        "wheel": wheel.name,
        "wheel_sha256": sha256(wheel),
        "flags": sorted((f.as_json() for f in flags), key=lambda f: f["name"]),
        "tool_call_parsers": registered_names(
            sources, tool_path, "_TOOL_PARSERS_TO_REGISTER", "ToolParserManager"
        ),
        "reasoning_parsers": registered_names(
            sources, REASONING, "_REASONING_PARSERS_TO_REGISTER", "ReasoningParserManager"
        ),
        "quantization_methods": quantization_methods(sources),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="vLLM versions, e.g. 0.16.0 0.32.0")
    parser.add_argument("--wheels", type=Path, default=Path("/tmp/vllm-wheels"))
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    for version in options.versions:
        data = flag_list(version, wheel_path(version, options.wheels))
        target = options.out / f"vllm-{version}.json"
        target.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=False) + "\n")
        print(f"{target}: {len(data['flags'])} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
