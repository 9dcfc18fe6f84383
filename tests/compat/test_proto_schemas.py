"""dlog's compiled BookKeeper schemas against upstream's, written out as data.

``upstream_schemas`` lists every message, field and enum value of upstream's
``BookkeeperProtocol.proto`` and ``DataFormats.proto``.  Every upstream
message and enum must exist in dlog's module under the same name (dlog's
proto package differs, so names are compared without it) with the same field
names, numbers, labels and types, and the same enum values.  dlog may add
fields and enum values only at numbers upstream does not use (its
extensions, such as BP-32 write close and the BP-44 contexts, take new
numbers), so a byte stream either side writes parses the same on the other.
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from dlog.protocol import bookkeeper_pb2, data_formats_pb2
from tests.compat import upstream_schemas
from tests.compat.upstream_schemas import Field

_TYPE_NAMES: dict[int, str] = {
    number: name[len("TYPE_") :].lower()
    for name, number in descriptor_pb2.FieldDescriptorProto.Type.items()
}


def _short(full_name: str, package: str) -> str:
    prefix = package + "." if package else ""
    return full_name[len(prefix) :] if full_name.startswith(prefix) else full_name


def _label(field: Any) -> str:
    if field.is_repeated:
        return "repeated"
    if field.is_required:
        return "required"
    return "optional"


def _type(field: Any, package: str) -> str:
    name = _TYPE_NAMES[field.type]
    if field.message_type is not None:
        return f"{name}:{_short(field.message_type.full_name, package)}"
    if field.enum_type is not None:
        return f"{name}:{_short(field.enum_type.full_name, package)}"
    return name


def _walk(module: ModuleType) -> tuple[dict[str, Any], dict[str, Any]]:
    """All messages and enums of ``module``, nested ones as ``Outer.Inner``."""
    package = module.DESCRIPTOR.package
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}

    def visit(message: Any) -> None:
        messages[_short(message.full_name, package)] = message
        for enum in message.enum_types:
            enums[_short(enum.full_name, package)] = enum
        for nested in message.nested_types:
            visit(nested)

    for message in module.DESCRIPTOR.message_types_by_name.values():
        visit(message)
    for enum in module.DESCRIPTOR.enum_types_by_name.values():
        enums[_short(enum.full_name, package)] = enum
    return messages, enums


def schema_mismatches(
    upstream_messages: dict[str, list[Field]],
    upstream_enums: dict[str, dict[str, int]],
    module: ModuleType,
) -> list[str]:
    """Every way ``module`` disagrees with the upstream tables, one line each."""
    package = module.DESCRIPTOR.package
    messages, enums = _walk(module)
    problems: list[str] = []
    for name, fields in upstream_messages.items():
        ours = messages.get(name)
        if ours is None:
            problems.append(f"message {name}: missing")
            continue
        by_number = {f.number: f for f in ours.fields}
        for field_name, number, label, type_name in fields:
            mine = by_number.get(number)
            if mine is None:
                problems.append(f"{name}.{field_name} = {number}: missing")
                continue
            got = (mine.name, number, _label(mine), _type(mine, package))
            want = (field_name, number, label, type_name)
            if got != want:
                problems.append(f"{name} field {number}: upstream {want}, dlog {got}")
    for name, values in upstream_enums.items():
        enum = enums.get(name)
        if enum is None:
            problems.append(f"enum {name}: missing")
            continue
        by_number = {v.number: v.name for v in enum.values}
        for value_name, number in values.items():
            mine_name = by_number.get(number)
            if mine_name != value_name:
                problems.append(
                    f"enum {name} value {number}: upstream {value_name}, dlog {mine_name}"
                )
        used = set(values.values())
        for value in enum.values:
            if value.name in values and values[value.name] != value.number:
                problems.append(
                    f"enum {name}.{value.name}: upstream {values[value.name]}, dlog {value.number}"
                )
            elif value.name not in values and value.number in used:
                problems.append(f"enum {name}.{value.name} = {value.number}: number used upstream")
    return problems


CASES = [
    pytest.param(
        upstream_schemas.BOOKKEEPER_PROTOCOL_MESSAGES,
        upstream_schemas.BOOKKEEPER_PROTOCOL_ENUMS,
        bookkeeper_pb2,
        id="BookkeeperProtocol.proto",
    ),
    pytest.param(
        upstream_schemas.DATA_FORMATS_MESSAGES,
        upstream_schemas.DATA_FORMATS_ENUMS,
        data_formats_pb2,
        id="DataFormats.proto",
    ),
]


@pytest.mark.parametrize(("messages", "enums", "module"), CASES)
def test_schema_matches_upstream(
    messages: dict[str, list[Field]],
    enums: dict[str, dict[str, int]],
    module: ModuleType,
) -> None:
    assert schema_mismatches(messages, enums, module) == []


def test_tables_cover_upstream() -> None:
    """The data is complete enough to mean something."""
    bk = upstream_schemas.BOOKKEEPER_PROTOCOL_MESSAGES
    df = upstream_schemas.DATA_FORMATS_MESSAGES
    assert {"Request", "Response", "AddRequest", "ReadResponse"} <= set(bk)
    assert {"LedgerMetadataFormat", "CookieFormat", "BookieServiceInfoFormat"} <= set(df)
    assert upstream_schemas.BOOKKEEPER_PROTOCOL_ENUMS["StatusCode"]["EFENCED"] == 504


def test_checker_reports_each_kind_of_mismatch() -> None:
    """A changed number, label, type or enum value upstream is reported."""
    messages = copy.deepcopy(upstream_schemas.BOOKKEEPER_PROTOCOL_MESSAGES)
    enums = copy.deepcopy(upstream_schemas.BOOKKEEPER_PROTOCOL_ENUMS)
    messages["AddRequest"][3] = ("masterKey", 9, "required", "bytes")
    messages["ReadRequest"][2] = ("entryId", 2, "optional", "int64")
    messages["ReadResponse"][1] = ("ledgerId", 2, "required", "uint64")
    messages["Missing"] = []
    enums["StatusCode"]["EFENCED"] = 508
    assert schema_mismatches(messages, enums, bookkeeper_pb2) == [
        "ReadRequest field 2: upstream ('entryId', 2, 'optional', 'int64'), "
        "dlog ('entryId', 2, 'required', 'int64')",
        "AddRequest.masterKey = 9: missing",
        "ReadResponse field 2: upstream ('ledgerId', 2, 'required', 'uint64'), "
        "dlog ('ledgerId', 2, 'required', 'int64')",
        "message Missing: missing",
        "enum StatusCode value 508: upstream EFENCED, dlog None",
        "enum StatusCode.EFENCED: upstream 508, dlog 504",
    ]
