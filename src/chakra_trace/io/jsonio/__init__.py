"""Lossless JSON export and import of a `Trace`.

Two layouts, one node encoding:

* a JSON document ``{"format": "chakra-trace-json", "version": 1, "metadata": {...},
  "nodes": [...]}``;
* JSON Lines (``.jsonl``): the first line is the header object (format, version, metadata),
  then one node object per line.

Either may be gzipped. A node object is::

    {"id": 7, "name": "aten::mm", "type": "COMP_NODE", "ctrl_deps": [1], "data_deps": [5, 6],
     "start_time_micros": 0, "duration_micros": 12,
     "inputs": {"values": "...", "shapes": "...", "types": "..."},      (only if present)
     "outputs": {...},                                                   (only if present)
     "attr": [{"name": "is_cpu_op", "bool_val": true}, ...],
     "unknown_fields": "<base64>"}                                       (only if non-empty)

The mapping is lossless: uint64 values are JSON integers; an attribute keeps its protobuf
oneof member as its key (none when it has no value); ``bytes`` are base64; non-finite doubles
and floats are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (a NaN whose bits are not
the canonical quiet NaN is written ``"NaN:0x<hex bits>"`` so that it round-trips too); a
``float`` member is written as the shortest decimal that reads back to the same 32-bit value.
Wire fields the schema does not know are kept as base64 ``unknown_fields`` on the node, the
metadata, an attribute or an inputs/outputs object; a list message with unknown fields is
written as ``{"values": [...], "unknown_fields": "..."}`` instead of a bare array. Attributes
are written in wire order, so a trace read back re-serializes byte-identically.

Both directions stream: writing encodes a bounded number of rows at a time, reading parses
JSON Lines line by line and the ``nodes`` array of a document one element at a time.

Modules: `spec` (name, version, file names, unknown-field isolation: what both directions
share), `writer`, `scanner` (the input text to JSON values and layout events) and `reader`
(those values checked and turned into protobuf messages), each importing only those before it.
"""

from .reader import read_json
from .spec import FORMAT, VERSION, is_json_lines_path, is_json_path
from .writer import attr_to_json, header_json, iter_json_nodes, metadata_to_json, write_json

__all__ = [
    "FORMAT",
    "VERSION",
    "attr_to_json",
    "header_json",
    "is_json_lines_path",
    "is_json_path",
    "iter_json_nodes",
    "metadata_to_json",
    "read_json",
    "write_json",
]
