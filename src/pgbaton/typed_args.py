"""Typed job args (docs/howto/typed-args.md): a handler's parameter annotations, judged
by pydantic when it is installed (the extra `pgbaton[pydantic]`). No I/O.

A parameter annotated with a pydantic model, a dataclass, a TypedDict or a plain type
(int, datetime, list[str], Literal[...]) has its value validated at enqueue and stored
as JSON (a model passed to defer() is stored as its JSON form), and is handed to the
handler as that type at run. Without pydantic, annotations are ignored, as before.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import ArgsRejected, ConfigurationError, InvalidArgument

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

SHOWN_PROBLEMS = 5  # a validation error lists at most this many problems
_UNTYPED = (inspect.Parameter.empty, Any, object)
_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
# Annotations whose adapter hands a value of exactly that type back as it is (validated,
# and made JSON: inf and NaN too), so such a value need not be given to it.
_AS_IS = (int, float, str, bool)


def _pydantic_available() -> bool:
    try:
        import pydantic  # noqa: F401
    except ImportError:
        return False
    return True


class ArgTypes:
    """The typed parameters of one task's handler: a pydantic TypeAdapter for each
    parameter whose annotation pydantic can judge. Empty (false) without pydantic, or
    when no parameter has such an annotation."""

    def __init__(
        self, task: str, func: Callable[..., Any], signature: inspect.Signature,
        *, sealed: bool = False,
    ) -> None:
        self.task = task
        # An encrypting task's problems name the parameter only: a path inside it may
        # hold a dict's keys, which are the task's data too.
        self.sealed = sealed
        self.signature = signature
        self.adapters: dict[str, TypeAdapter[Any]] = {}
        # Each typed parameter's type when all are one of _AS_IS (`seq: int`), decided
        # here once: args of exactly those types run as they are (Task.args_for_run).
        self.as_is: tuple[tuple[str, type], ...] | None = None
        parameters = [p for p in signature.parameters.values() if p.kind in _BY_NAME]
        if not any(p.annotation not in _UNTYPED for p in parameters):
            return
        if not _pydantic_available():
            return
        from pydantic import PydanticSchemaGenerationError, TypeAdapter

        hints = _hints(func)
        judged: list[tuple[str, Any]] = []
        for parameter in parameters:
            annotation = hints.get(parameter.name, parameter.annotation)
            if annotation in _UNTYPED or isinstance(annotation, str):
                continue  # a name that does not resolve (a class local to a function)
            try:
                self.adapters[parameter.name] = TypeAdapter(annotation)
                judged.append((parameter.name, annotation))
            except PydanticSchemaGenerationError:
                continue  # a type pydantic cannot judge (a class of the caller's)
            except Exception as error:  # typing.TypedDict before Python 3.12, say
                raise ConfigurationError(
                    f"task {task!r}: pydantic cannot judge the annotation of parameter "
                    f"{parameter.name!r}: {str(error).splitlines()[0]}"
                ) from None
        if judged and all(any(kind is same for same in _AS_IS) for _, kind in judged):
            self.as_is = tuple(judged)

    def __bool__(self) -> bool:
        return bool(self.adapters)

    def check(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The args as the job stores them: each typed one validated and made JSON (a
        model to its fields, a datetime to ISO text). InvalidArgument naming each field
        at fault and the problem (never its value: it may be a secret)."""
        stored = dict(args)
        problems: list[str] = []
        for name, adapter in self.adapters.items():
            if name not in args:
                continue
            try:
                # The adapter's core validator and serializer: the same work without
                # TypeAdapter's per-call checks, a third of the cost (every enqueue).
                stored[name] = adapter.serializer.to_python(
                    adapter.validator.validate_python(args[name]), mode="json")
            except Exception as error:
                problems.extend(_problems(name, error, sealed=self.sealed))
        if problems:
            raise InvalidArgument(self._message(problems) + "; nothing was written")
        return stored

    def convert(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """A claimed job's stored args as the handler's types (a dict to its model, its
        dataclass); ArgsRejected as check() words it when they do not fit."""
        given = dict(args)
        problems: list[str] = []
        for name, adapter in self.adapters.items():
            if name not in args:
                continue
            try:
                given[name] = adapter.validator.validate_python(args[name])
            except Exception as error:
                problems.extend(_problems(name, error, sealed=self.sealed))
        if problems:
            raise ArgsRejected(self._message(problems))
        return given

    def _message(self, problems: list[str]) -> str:
        shown = problems[:SHOWN_PROBLEMS]
        more = len(problems) - len(shown)
        return (f"args for task {self.task!r} do not fit its handler's types: "
                + "; ".join(shown) + (f"; and {more} more" if more else ""))

    def json_schema(self) -> dict[str, Any]:
        """The args as one JSON Schema object: each typed parameter's schema, {} for an
        untyped one, the required ones, and whether others are taken (**kwargs)."""
        properties: dict[str, Any] = {}
        definitions: dict[str, Any] = {}
        required: list[str] = []
        takes_any = False
        for parameter in self.signature.parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                takes_any = True
            if parameter.kind not in _BY_NAME:
                continue
            schema: dict[str, Any] = {}
            adapter = self.adapters.get(parameter.name)
            if adapter is not None:
                try:
                    schema = adapter.json_schema(ref_template="#/$defs/{model}")
                except Exception:  # a type with no JSON Schema (a callable's, say)
                    schema = {}
                definitions.update(schema.pop("$defs", {}))
            if parameter.default is parameter.empty:
                required.append(parameter.name)
            properties[parameter.name] = schema
        document: dict[str, Any] = {
            "title": self.task, "type": "object", "properties": properties,
            "required": required, "additionalProperties": takes_any,
        }
        if definitions:
            document["$defs"] = definitions
        return document


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """The handler's annotations resolved (`from __future__ import annotations` makes
    them text); one at a time when some name does not resolve, so the rest are judged."""
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(func, "__globals__", {})
    for name, annotation in getattr(func, "__annotations__", {}).items():
        try:
            hints[name] = typing.get_type_hints(
                _Holder(name, annotation), globalns=namespace, include_extras=True)[name]
        except Exception:
            continue
    return hints


class _Holder:
    """Carries one annotation for typing.get_type_hints."""

    def __init__(self, name: str, annotation: Any) -> None:
        self.__annotations__ = {name: annotation}


# A path part shown as it is: a field's name. Anything else (a dict's key, which is
# data) is shown as [key].
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# pydantic messages that quote the input itself, and what is said instead.
_QUOTING = {"union_tag_invalid": "its tag matches none of the expected tags"}


def _problems(name: str, error: Exception, *, sealed: bool = False) -> list[str]:
    """One line per problem of a pydantic ValidationError: where (the arg, then the path
    inside it) and what, without the input: no value, and no dict key, since keys are
    data too (an encrypting task shows the arg's name alone)."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return [f"{name}: {type(error).__name__}"]
    lines = []
    for item in typing.cast("ValidationError", error).errors(
        include_url=False, include_input=False, include_context=False
    ):
        parts = [] if sealed else [_path_part(part) for part in item["loc"]]
        where = ".".join([name, *parts])
        lines.append(f"{where}: {_QUOTING.get(item['type'], item['msg'])}")
    return lines


def _path_part(part: object) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    text = str(part)
    return text if _FIELD_NAME.fullmatch(text) else "[key]"
