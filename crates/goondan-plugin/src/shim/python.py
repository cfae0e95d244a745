"""Goondan plugin shim for Python (plugin protocol version 1).

Started as `python3 -u shim.py <entry>`: imports the user's module and
speaks JSON-RPC 2.0, one message per line, on stdin/stdout. Module shapes:

    handlers = {"name": fn}        # fn(ctx, input), sync or async
    def register(api, config): ... # extensions; middlewares are async

stdout belongs to the protocol, so print() goes to stderr.
See docs/plugin-protocol.md.
"""

import asyncio
import importlib.util
import inspect
import json
import os
import sys
import threading

PROTOCOL_VERSION = 1
ENTRY = sys.argv[-1]

_protocol_out = sys.stdout
# User code printing to stdout would corrupt the protocol.
sys.stdout = sys.stderr


def _write(message):
    _protocol_out.write(json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n")
    _protocol_out.flush()


class Context(dict):
    """A dict whose keys read as attributes too, in camelCase or snake_case."""

    def __getattr__(self, name):
        if name in self:
            return self[name]
        parts = name.split("_")
        camel = parts[0] + "".join(part.title() for part in parts[1:])
        if camel in self:
            return self[camel]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        self[name] = value


class PluginError(Exception):
    """Raise to give a tool error a code and a suggestion."""

    def __init__(self, message, code=None, suggestion=None, data=None):
        super().__init__(message)
        self.code = code
        self.suggestion = suggestion
        self.data = data or {}


class _Host:
    def __init__(self):
        self.next_id = 1
        self.pending = {}
        self.loop = None

    def call(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        future = self.loop.create_future()
        self.pending[request_id] = future
        _write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return future

    def notify(self, method, params):
        _write({"jsonrpc": "2.0", "method": method, "params": params})


HOST = _Host()


class _Logger:
    def __init__(self, fields):
        self.fields = fields

    def _send(self, level, message, *args):
        text = str(message) % args if args else str(message)
        HOST.notify("log", {"level": level, "message": text, "fields": self.fields})

    def debug(self, message, *args):
        self._send("debug", message, *args)

    def info(self, message, *args):
        self._send("info", message, *args)

    def warning(self, message, *args):
        self._send("warn", message, *args)

    warn = warning

    def error(self, message, *args):
        self._send("error", message, *args)


class _Agents:
    """`ctx.agents` of a tool call: other agents of the swarm."""

    def __init__(self, invocation):
        self.invocation = invocation

    async def request(self, target, input, **options):
        return await HOST.call("agents.request", dict(options, invocation=self.invocation, target=target, input=input))

    async def send(self, target, input, **options):
        return await HOST.call("agents.send", dict(options, invocation=self.invocation, target=target, input=input))

    async def catalog(self):
        return await HOST.call("agents.catalog", {"invocation": self.invocation})


def _camel(key):
    parts = key.split("_")
    return parts[0] + "".join(part.title() for part in parts[1:])


class _MiddlewareAgents:
    """`ctx.agents` of a turn or step middleware (seed 000 §4.4):
    `await ctx.agents.request(target=..., input=...)`, or one dict."""

    def __init__(self, invocation):
        self.invocation = invocation

    def _params(self, method, request, options):
        params = dict(request or {}, **options)
        if not isinstance(params.get("target"), str):
            raise PluginError("ctx.agents.%s takes target=..., input=..., instance_key=..., ..." % method,
                              "E_AGENT_BAD_REQUEST")
        params = {_camel(key): value for key, value in params.items() if value is not None}
        params["invocation"] = self.invocation
        return params

    async def request(self, request=None, **options):
        return await HOST.call("agents.request", self._params("request", request, options))

    async def send(self, request=None, **options):
        return await HOST.call("agents.send", self._params("send", request, options))


class ConversationState:
    """A live `conversationState`: the Turn's base and events arrive with
    `middleware.invoke`; the events the inner chain adds come back with
    `next`, the middleware's own are applied as it emits them, so
    `next_messages` is always `base_messages + SUM(events)`."""

    def __init__(self, wire):
        wire = wire or {}
        self._base = list(wire.get("baseMessages") or [])
        self._events = []
        self._next = list(self._base)
        for event in wire.get("events") or []:
            self.apply(event)

    def apply(self, event):
        self._events.append(event)
        kind = (event or {}).get("type")
        if kind == "append":
            self._next.append(event.get("message"))
        elif kind in ("replace", "remove"):
            for index, message in enumerate(self._next):
                if (message or {}).get("id") == event.get("targetId"):
                    if kind == "replace":
                        self._next[index] = event.get("message")
                    else:
                        del self._next[index]
                    break
        elif kind == "truncate":
            self._next = []

    def catch_up(self, delta):
        for event in (delta or {}).get("events") or []:
            self.apply(event)

    @property
    def base_messages(self):
        return self._base

    @property
    def events(self):
        return self._events

    @property
    def next_messages(self):
        return self._next

    def to_llm_messages(self):
        return [message.get("data") for message in self._next]

    baseMessages = base_messages
    nextMessages = next_messages
    toLlmMessages = to_llm_messages


def _ask_person(invocation):
    """`await ctx.ask_person(question, name=, details=, timeout_seconds=,
    on_timeout=)`: the decision once a person (or the timeout) decides."""

    async def ask_person(question=None, name=None, details=None, timeout_seconds=None, on_timeout=None):
        params = {"invocation": invocation, "question": question, "name": name, "details": details,
                  "timeoutSeconds": timeout_seconds, "onTimeout": on_timeout}
        return await HOST.call("operator.ask", {k: v for k, v in params.items() if v is not None})

    return ask_person


def _sent(future, what):
    """A request already written, whose caller may not await it: a failure
    goes to the log instead of being lost."""

    def report(done):
        if done.exception() is not None:
            sys.stderr.write("%s failed: %s\n" % (what, done.exception()))

    future.add_done_callback(report)
    return future


async def _maybe_await(value):
    if inspect.isawaitable(value):
        return await value
    return value


class _Plugin:
    def __init__(self):
        self.module = None
        self.handlers = {}
        self.register = None
        self.dynamic_tools = {}
        self.middlewares = {}
        self.subscriptions = {}

    def load(self):
        folder = os.path.dirname(os.path.abspath(ENTRY))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = "goondan_plugin_" + os.path.splitext(os.path.basename(ENTRY))[0].replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, ENTRY)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        self.module = module
        handlers = getattr(module, "handlers", None)
        if isinstance(handlers, dict):
            self.handlers = {key: fn for key, fn in handlers.items() if callable(fn)}
        if not self.handlers and callable(getattr(module, "main", None)):
            self.handlers = {"default": module.main}
        register = getattr(module, "register", None)
        self.register = register if callable(register) else None

    async def initialize(self, _params):
        self.load()
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "exports": {
                "tools": list(self.handlers),
                "register": self.register is not None,
                "connector": False,
            },
        }

    async def tool_invoke(self, params):
        if "tool" in params:
            fn = self.dynamic_tools.get(params["tool"])
        else:
            fn = self.handlers.get(params.get("export"))
        if fn is None:
            raise PluginError("no tool handler named %s" % params.get("tool", params.get("export")), "E_PLUGIN_EXPORT_MISSING")
        context = Context(params.get("context") or {})
        context["logger"] = _Logger({"toolCallId": context.get("toolCallId")})
        context["agents"] = _Agents(params.get("invocation"))
        context["ask_person"] = _ask_person(params.get("invocation"))
        output = await _maybe_await(fn(context, params.get("args") or {}))
        return {"output": output}

    async def extension_register(self, params):
        if self.register is None:
            raise PluginError("%s does not define register(api, config)" % ENTRY, "E_PLUGIN_NO_REGISTER")
        extension = params["extension"]
        registrations = {"middlewares": [], "tools": [], "subscriptions": []}
        plugin = self

        class Pipeline:
            def register(self, kind, fn, options=None, priority=None):
                if kind not in ("turn", "step", "toolCall"):
                    raise ValueError("unknown middleware kind %s: use turn, step or toolCall" % kind)
                if priority is None:
                    priority = (options or {}).get("priority", 0)
                middleware_id = "%s#%s#%d" % (extension, kind, len(registrations["middlewares"]))
                plugin.middlewares[middleware_id] = fn
                registrations["middlewares"].append({"id": middleware_id, "kind": kind, "priority": priority})

        class Tools:
            def register(self, item, handler):
                plugin.dynamic_tools[item["name"]] = handler
                registrations["tools"].append({"item": item})

        class State:
            async def get(self):
                return (await HOST.call("state.get", {"extension": extension})).get("value")

            async def set(self, value):
                await HOST.call("state.set", {"extension": extension, "value": value})

        class Events:
            def on(self, event, handler):
                subscription = "%s#event#%d#%s" % (extension, len(plugin.subscriptions), event)
                plugin.subscriptions[subscription] = handler
                registrations["subscriptions"].append({"id": subscription, "event": event})
                return lambda: plugin.subscriptions.pop(subscription, None)

            def emit(self, event, *args):
                # Sync, as the original's `emit(event, ...args): void`: the
                # request is written now; await the future for the host's
                # answer (how many handlers it reached).
                payload = args[0] if args else None
                return _sent(HOST.call("events.emit", {"extension": extension, "event": event, "payload": payload,
                                                       "args": list(args)}), "events.emit")

        api = Context(pipeline=Pipeline(), tools=Tools(), state=State(), events=Events(), logger=_Logger({"extension": extension}))
        await _maybe_await(self.register(api, params.get("config")))
        return registrations

    async def middleware_invoke(self, params):
        fn = self.middlewares.get(params["middleware"])
        if fn is None:
            raise PluginError("no middleware %s" % params["middleware"])
        invocation = params["invocation"]
        kind = params["kind"]
        ctx = Context(params.get("context") or {})
        state = None
        if kind in ("turn", "step"):
            state = ConversationState(ctx.get("conversationState"))
            ctx["conversationState"] = state
            ctx["agents"] = _MiddlewareAgents(invocation)

        async def next_():
            changes = {"metadata": ctx.get("metadata")}
            if kind == "step":
                changes["toolCatalog"] = ctx.get("toolCatalog")
            if kind == "toolCall":
                changes["args"] = ctx.get("args")
            try:
                answer = await HOST.call("middleware.next", {"invocation": invocation, "changes": changes})
            except PluginError as error:
                if state is not None:
                    state.catch_up(error.data.get("conversationState"))
                raise
            if state is not None:
                state.catch_up(answer.get("conversationState"))
            return answer.get("result")

        def emit_message_event(event):
            # Sync, as in the original: the request is written now, and the
            # host serves it before this invocation's next call. Awaiting
            # the returned future waits for the host's answer.
            if state is not None:
                state.apply(event)
            return _sent(HOST.call("message.emit", {"invocation": invocation, "event": event}), "emit_message_event")

        ctx["next"] = next_
        ctx["emitMessageEvent"] = emit_message_event
        ctx["emit_message_event"] = emit_message_event
        ctx["ask_person"] = _ask_person(invocation)
        ctx["logger"] = _Logger({"middleware": params["middleware"]})
        result = await _maybe_await(fn(ctx))
        return {"result": result}

    async def shutdown(self, _params):
        HOST.loop.call_later(0, HOST.loop.stop)
        return None


PLUGIN = _Plugin()
METHODS = {
    "initialize": PLUGIN.initialize,
    "tool.invoke": PLUGIN.tool_invoke,
    "extension.register": PLUGIN.extension_register,
    "middleware.invoke": PLUGIN.middleware_invoke,
    "shutdown": PLUGIN.shutdown,
}


def _error_object(error):
    data = {"name": type(error).__name__}
    code = getattr(error, "code", None)
    if isinstance(code, str):
        data["code"] = code
    suggestion = getattr(error, "suggestion", None)
    if isinstance(suggestion, str):
        data["suggestion"] = suggestion
    message = str(error) or type(error).__name__
    return {"code": -32000, "message": message, "data": data}


async def _serve(message):
    method = METHODS.get(message["method"])
    if method is None:
        _write({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no method %s" % message["method"]}})
        return
    try:
        result = await method(message.get("params") or {})
        _write({"jsonrpc": "2.0", "id": message["id"], "result": result})
    except Exception as error:  # every user error becomes an error answer
        _write({"jsonrpc": "2.0", "id": message["id"], "error": _error_object(error)})


def _dispatch(line):
    try:
        message = json.loads(line)
    except ValueError:
        sys.stderr.write("the host sent a line that is not JSON\n")
        return
    if "method" not in message:
        future = HOST.pending.pop(message.get("id"), None)
        if future is None or future.done():
            return
        if "error" in message:
            error = message["error"]
            data = error.get("data") or {}
            future.set_exception(PluginError(error.get("message", ""), data.get("code"), data.get("suggestion"), data))
        else:
            future.set_result(message.get("result"))
    elif message.get("id") is None:
        if message["method"] == "events.dispatch":
            params = message.get("params") or {}
            handler = PLUGIN.subscriptions.get(params.get("subscription"))
            if handler is not None:
                args = params.get("args")
                if not isinstance(args, list):
                    args = [params.get("payload")]
                asyncio.ensure_future(_maybe_await(handler(*args)))
        # "$/cancel": the answer is dropped by the host; nothing to stop.
    else:
        asyncio.ensure_future(_serve(message))


def _read_stdin(loop):
    for line in sys.stdin.buffer:
        if line.strip():
            loop.call_soon_threadsafe(_dispatch, line)
    loop.call_soon_threadsafe(loop.stop)


def main():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    HOST.loop = loop
    threading.Thread(target=_read_stdin, args=(loop,), daemon=True).start()
    loop.run_forever()


if __name__ == "__main__":
    main()
