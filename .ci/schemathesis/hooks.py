"""Schemathesis hooks for the example service (loaded with SCHEMATHESIS_HOOKS by .ci/run).

Schemathesis judges each request on its own, but an Idempotency-Key is valid once per
request: the same key sent again with another method, path or body is answered 422
`idempotency-key-reused`, by design. Its generators repeat values (the schema's example,
the shortest string), so a schema-valid request would meet a key an earlier, different
request used, and `positive_data_acceptance` would count the protocol's answer as a
refusal. This hook gives such a request a fresh key, as a client would. A key sent again
with the same request is left alone, so replays are still exercised, and so is every key
the server must refuse: only keys the schema's pattern accepts are ever replaced.
"""

import json
import re
import threading
import uuid

import schemathesis

# The pattern idem publishes for the header (idem-runtime/src/openapi.rs, `key_pattern`).
KEY = re.compile(r'(?:[!#-~][!-~]{0,254}|"(?:[!#-\[\]-~]|\\["\\]){1,255}")')

# key -> the request it was first sent with.
_seen = {}
_lock = threading.Lock()


def _header(headers, name):
    for header, value in (headers or {}).items():
        if header.lower() == name.lower():
            return header, value
    return None, None


def _key_as_meant(value):
    """The key a header value names: a Structured Field string is the same key bare."""
    if value.startswith('"'):
        return re.sub(r'\\(["\\])', r"\1", value[1:-1])
    return value


@schemathesis.hook
def before_call(ctx, case, kwargs):
    name, value = _header(case.headers, "Idempotency-Key")
    if not isinstance(value, str) or not KEY.fullmatch(value):
        return
    request = json.dumps(
        [case.method.upper(), case.formatted_path, case.query, case.body],
        sort_keys=True,
        default=repr,
    )
    # Keyed by the key alone, not by the account idem scopes it with: the account a
    # request is sent as may be set after this hook (`-H`), and a fresh key where one
    # was not needed costs nothing.
    key = _key_as_meant(value)
    with _lock:
        first = _seen.setdefault(key, request)
        if first != request:
            fresh = str(uuid.uuid4())
            _seen[fresh] = request
            case.headers[name] = fresh
