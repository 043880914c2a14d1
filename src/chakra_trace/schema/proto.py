"""Protobuf message classes for the Chakra schema, built at import time from a descriptor.

Generated `_pb2` modules pin the protobuf runtime they were generated for; building the
descriptor here from plain Python works on every runtime from 4.21 to the newest, with no
code generation at install time. A private descriptor pool keeps us from clashing with the
reference toolkit's `et_def_pb2` if both are imported in one process.

`chakra.proto` beside this file is the same schema as text; a test keeps the two equal.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .enums import CollectiveType, NodeType

PACKAGE = "ChakraProtoMsg"
FILE_NAME = "chakra_trace/chakra.proto"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE,
    "float": _F.TYPE_FLOAT,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "sint32": _F.TYPE_SINT32,
    "sint64": _F.TYPE_SINT64,
    "fixed32": _F.TYPE_FIXED32,
    "fixed64": _F.TYPE_FIXED64,
    "sfixed32": _F.TYPE_SFIXED32,
    "sfixed64": _F.TYPE_SFIXED64,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

# (scalar type, list message name) in AttributeProto oneof order; field numbers 3..32.
ATTR_VALUE_TYPES = [
    ("double", "DoubleList"),
    ("float", "FloatList"),
    ("int32", "Int32List"),
    ("int64", "Int64List"),
    ("uint32", "Uint32List"),
    ("uint64", "Uint64List"),
    ("sint32", "Sint32List"),
    ("sint64", "Sint64List"),
    ("fixed32", "Fixed32List"),
    ("fixed64", "Fixed64List"),
    ("sfixed32", "Sfixed32List"),
    ("sfixed64", "Sfixed64List"),
    ("bool", "BoolList"),
    ("string", "StringList"),
    ("bytes", "BytesList"),
]

# member name -> (field number, scalar type, is_list)
ATTR_MEMBERS: dict[str, tuple[int, str, bool]] = {}
for _i, (_t, _list) in enumerate(ATTR_VALUE_TYPES):
    ATTR_MEMBERS[f"{_t}_val"] = (3 + 2 * _i, _t, False)
    ATTR_MEMBERS[f"{_t}_list"] = (4 + 2 * _i, _t, True)
_LIST_OF = dict(ATTR_VALUE_TYPES)
ATTR_MEMBER_BY_FIELD = {num: name for name, (num, _t, _l) in ATTR_MEMBERS.items()}

# (message, [(field name, number, type or message/enum name, repeated)])
_MESSAGES = [
    ("GlobalMetadata", [("version", 1, "string", False), ("attr", 2, ".AttributeProto", True)]),
    (
        "Node",
        [
            ("id", 1, "uint64", False),
            ("name", 2, "string", False),
            ("type", 3, "enum NodeType", False),
            ("ctrl_deps", 4, "uint64", True),
            ("data_deps", 5, "uint64", True),
            ("start_time_micros", 6, "uint64", False),
            ("duration_micros", 7, "uint64", False),
            ("inputs", 8, ".IOInfo", False),
            ("outputs", 9, ".IOInfo", False),
            ("attr", 10, ".AttributeProto", True),
        ],
    ),
    ("IOInfo", [("values", 1, "string", False), ("shapes", 2, "string", False), ("types", 3, "string", False)]),
    (
        "Tensor",
        [
            ("tensor_id", 1, "uint64", False),
            ("storage_id", 2, "uint64", False),
            ("offset", 3, "uint64", False),
            ("num_elem", 4, "uint64", False),
            ("elem_bytes", 5, "uint64", False),
            ("device", 6, "string", False),
        ],
    ),
] + [(lst, [("values", 1, t, True)]) for t, lst in ATTR_VALUE_TYPES]


def _field(msg: descriptor_pb2.DescriptorProto, name: str, number: int, ftype: str, repeated: bool):
    f = msg.field.add(name=name, number=number)
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if ftype.startswith("enum "):
        f.type = _F.TYPE_ENUM
        f.type_name = f".{PACKAGE}.{ftype[5:]}"
    elif ftype.startswith("."):
        f.type = _F.TYPE_MESSAGE
        f.type_name = f".{PACKAGE}{ftype}"
    else:
        f.type = _SCALARS[ftype]
    return f


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for enum_cls in (NodeType, CollectiveType):
        e = fdp.enum_type.add(name=enum_cls.__name__)
        for value in enum_cls:
            e.value.add(name=value.name, number=int(value))
    for name, fields in _MESSAGES:
        msg = fdp.message_type.add(name=name)
        for fname, num, ftype, rep in fields:
            _field(msg, fname, num, ftype, rep)
    attr = fdp.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, "string", False)
    _field(attr, "doc_string", 2, "string", False)
    attr.oneof_decl.add(name="value")
    for member, (num, t, is_list) in sorted(ATTR_MEMBERS.items(), key=lambda kv: kv[1][0]):
        f = _field(attr, member, num, "." + _LIST_OF[t] if is_list else t, False)
        f.oneof_index = 0
    return fdp


def _message_classes() -> dict:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:  # protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get_class = factory.GetPrototype
    names = [m for m, _ in _MESSAGES] + ["AttributeProto"]
    return {n: get_class(pool.FindMessageTypeByName(f"{PACKAGE}.{n}")) for n in names}


_classes = _message_classes()
GlobalMetadata = _classes["GlobalMetadata"]
Node = _classes["Node"]
IOInfo = _classes["IOInfo"]
Tensor = _classes["Tensor"]
AttributeProto = _classes["AttributeProto"]
LIST_CLASSES = {t: _classes[lst] for t, lst in ATTR_VALUE_TYPES}


def proto_text() -> str:
    """The schema as `.proto` text (what `chakra.proto` holds)."""
    fdp = file_descriptor_proto()
    type_names = {v: k for k, v in _SCALARS.items()}
    out = [
        "// Chakra execution trace schema, wire-compatible with MLCommons Chakra (et_def.proto).",
        "// Generated from chakra_trace.schema.proto; field numbers are the wire contract.",
        'syntax = "proto3";',
        "",
        f"package {PACKAGE};",
        "",
    ]
    for e in fdp.enum_type:
        out.append(f"enum {e.name} {{")
        out += [f"  {v.name} = {v.number};" for v in e.value]
        out += ["}", ""]

    def ftype(f) -> str:
        if f.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM):
            return f.type_name.rsplit(".", 1)[-1]
        return type_names[f.type]

    for m in fdp.message_type:
        out.append(f"message {m.name} {{")
        in_oneof = False
        for f in m.field:
            if f.HasField("oneof_index") and not in_oneof:
                out.append(f"  oneof {m.oneof_decl[f.oneof_index].name} {{")
                in_oneof = True
            pad = "    " if in_oneof else "  "
            rep = "repeated " if f.label == _F.LABEL_REPEATED else ""
            out.append(f"{pad}{rep}{ftype(f)} {f.name} = {f.number};")
        if in_oneof:
            out.append("  }")
        out += ["}", ""]
    return "\n".join(out)


if __name__ == "__main__":  # python -m chakra_trace.schema.proto > chakra.proto
    print(proto_text(), end="")
