"""Plain values across the wall between model code and the tests that judge it, and the frames that carry them.

The process that runs model code (the candidate) sends back only data: `encode` turns a result into
tagged JSON of exact built-in types (int, float, str, bool, None, bytes, list, tuple, dict, set), and
`decode`, in the process that runs the tests, rebuilds fresh built-in objects from it. No object the
model made crosses, so an `__eq__` that is always true, a subclass of `int` or a generator has nothing
to stand on: the tests compare real values. Frames are 4-byte lengths then UTF-8 JSON, capped at
`MAX_FRAME_BYTES`; a bigger frame or a deeper value than `MAX_DEPTH` is refused, not read.
Standard library only: it is imported by path inside the jail (`code_runner.py`).
"""

from __future__ import annotations

import json
import os
import struct

MAX_FRAME_BYTES = 1 << 20  # one call's reply; a result bigger than 1 MiB is not an answer
MAX_DEPTH = 64


class Unsendable(ValueError):
    """A value that is not plain data, or a frame that breaks the limits."""


def encode(value, depth: int = 0):
    """Tagged JSON for `value`; raises Unsendable for anything but exact built-in plain types."""
    if depth > MAX_DEPTH:
        raise Unsendable("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool:
        return ["c", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", repr(value)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["b", value.hex()]
    if kind in (list, tuple, set, frozenset):
        items = sorted(value, key=repr) if kind in (set, frozenset) else value
        return [{list: "l", tuple: "t", set: "e", frozenset: "z"}[kind], [encode(v, depth + 1) for v in items]]
    if kind is dict:
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise Unsendable(f"a {kind.__name__} is not plain data (int, float, str, bool, None, bytes, list, tuple, "
                     "dict, set)")


def decode(data, depth: int = 0):
    """The value `encode` described, built from fresh built-in objects; raises Unsendable on anything else."""
    if depth > MAX_DEPTH or type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise Unsendable("malformed value")
    tag, body = data
    if tag == "c" and (body is None or type(body) is bool):
        return body
    if tag == "i" and type(body) is str and len(body) <= 4000:
        return int(body)
    if tag == "f" and type(body) is str and len(body) <= 40:
        return float(body)
    if tag == "s" and type(body) is str:
        return body
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag in ("l", "t", "e", "z") and type(body) is list:
        items = [decode(item, depth + 1) for item in body]
        return {"l": list, "t": tuple, "e": set, "z": frozenset}[tag](items)
    if tag == "d" and type(body) is list:
        pairs = []
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise Unsendable("malformed dict item")
            pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
        return dict(pairs)
    raise Unsendable(f"malformed value with tag {tag[:10]!r}")


def write_frame(fd: int, message) -> None:
    """Write one frame (`message` as JSON) to descriptor `fd`."""
    payload = json.dumps(message).encode()
    if len(payload) > MAX_FRAME_BYTES:
        raise Unsendable(f"message of {len(payload)} bytes is over {MAX_FRAME_BYTES}")
    data = struct.pack(">I", len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def read_exact(fd: int, size: int, wait) -> bytes:
    """`size` bytes from `fd`; `wait()` blocks until `fd` is readable or raises. EOFError when it closes."""
    data = b""
    while len(data) < size:
        wait()
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("the other side closed")
        data += chunk
    return data


def read_frame(fd: int, wait=lambda: None):
    """One frame's JSON from `fd`; Unsendable for an oversized or unreadable frame."""
    size = struct.unpack(">I", read_exact(fd, 4, wait))[0]
    if size > MAX_FRAME_BYTES:
        raise Unsendable(f"frame of {size} bytes is over {MAX_FRAME_BYTES}")
    try:
        return json.loads(read_exact(fd, size, wait).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unsendable(f"unreadable frame: {str(exc)[:80]}") from None
