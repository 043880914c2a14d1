"""The result type every device analysis returns: named tables of rows, to pandas or JSON
(`chakra_trace.table.Tables`, under the name the device analyses have always used)."""

from ...table import Tables

__all__ = ["Tables"]
