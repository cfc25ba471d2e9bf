# Partial stubs: only the generated protobuf modules are typed (scripts/proto_stubs.py); every other
# name of the package is Any, as it is without these stubs.
from typing import Any

def __getattr__(name: str) -> Any: ...
