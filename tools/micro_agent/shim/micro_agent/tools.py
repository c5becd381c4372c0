"""`Tool` as a micro-agent plugin module builds it: `Tool(name, description, schema, func)`,
`schema` the JSON Schema of the arguments, `func` called with the arguments dict."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Tool:
    name: str
    description: str
    schema: dict
    func: Callable[[dict], Any]
