"""A tool in Python: `handlers` by export name, each `(ctx, input)`."""
import hashlib


def sha256(_ctx, input):
    return {"sha256": hashlib.sha256(input["text"].encode()).hexdigest()}


handlers = {"sha256": sha256}
