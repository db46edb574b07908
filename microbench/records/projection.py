"""Projections of the record model: a record type reduced to the fields a reader needs, with the same types and
ranges (what the columnar reader, ``results.scan``, decodes: every other field is skipped by the decoder without
becoming an object).
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

import msgspec


def project(kind: type, paths: set[str] | frozenset[str], name: str | None = None,
            absent_kept: frozenset[str] | None = None) -> type:
    """The struct ``kind`` reduced to the fields named in ``paths`` (dotted for nested blocks: ``latency_us.p50``;
    a bare block name keeps the block whole), with the same types and ranges: what the columnar reader decodes
    (every other field is skipped by the decoder without becoming an object).

    With ``absent_kept`` given, an absent field reads as None rather than ``msgspec.UNSET`` (a reader that
    only needs the value turns None into NaN at C speed), except the fields named in it, whose absence means
    something (a key field derived for records written before it existed)."""
    hints = msgspec.structs.fields(kind)
    wanted: dict[str, set[str]] = {}
    for path in paths:
        head, _, rest = path.partition(".")
        wanted.setdefault(head, set())
        if rest:
            wanted[head].add(rest)
    fields = []
    for f in hints:
        if f.name not in wanted:
            continue
        ftype = f.type
        inner = wanted[f.name]
        if not inner and absent_kept is not None:
            inner = _all_fields(ftype)  # a block kept whole: its absent fields read as None too
        if inner:
            ftype = _project_type(ftype, inner, f"{kind.__name__}_{f.name}", absent_kept)
        default = f.default if f.default is not msgspec.NODEFAULT else msgspec.NODEFAULT
        if default is msgspec.UNSET and absent_kept is not None and f.name not in absent_kept:
            default = None
        if f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, ftype, msgspec.field(default_factory=f.default_factory)))
        elif default is msgspec.NODEFAULT:
            fields.append((f.name, ftype))
        else:
            fields.append((f.name, ftype, default))
    fields.sort(key=lambda item: len(item) > 2)  # required fields first
    config = kind.__struct_config__
    options: dict[str, Any] = {"kw_only": True}
    if config.tag_field is not None:
        options.update(tag_field=config.tag_field, tag=config.tag)
    return msgspec.defstruct(name or f"{kind.__name__}View", fields, **options)


def _all_fields(ftype: Any) -> set[str]:
    """The field names of the struct inside ``ftype`` (Optional, Annotated or a union with UNSET), or none."""
    origin = typing.get_origin(ftype)
    if origin is Annotated:
        return _all_fields(typing.get_args(ftype)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_all_fields(a) for a in typing.get_args(ftype)))
    if isinstance(ftype, type) and issubclass(ftype, msgspec.Struct):
        return {f.name for f in msgspec.structs.fields(ftype)}
    return set()


def _project_type(ftype: Any, inner: set[str], name: str, absent_kept: frozenset[str] | None = None) -> Any:
    """``ftype`` (a Block, possibly Optional/Unset/Annotated) with its block reduced to ``inner``."""
    origin = typing.get_origin(ftype)
    if origin is Annotated:
        args = typing.get_args(ftype)
        return Annotated[(_project_type(args[0], inner, name, absent_kept), *args[1:])]
    if origin in (Union, types.UnionType):
        return Union[tuple(_project_type(a, inner, name, absent_kept) for a in typing.get_args(ftype))]
    if isinstance(ftype, type) and issubclass(ftype, msgspec.Struct):
        return project(ftype, inner, name, frozenset() if absent_kept is not None else None)
    return ftype
