// The run_code prelude, evaluated in every fresh engine before the program. It is a function
// of the tool names (a JSON array). It takes the host function the Go side registered
// (__dshd_host) off the global object, so that the program reaches the host only through `tools`
// and `console`, and returns [start, settle]: start runs the program's main function, settle
// resolves or rejects a binding's promise. Builtins are captured first: a program that replaces
// JSON or Object cannot change how its arguments are snapshotted.
(function (namesJSON) {
  "use strict";
  const g = globalThis;
  const host = g.__dshd_host;
  delete g.__dshd_host;
  const submit = (id, name, json) => host(0, id, name, json);
  const log = (line) => { host(1, 0, line, ""); };
  const done = (status, text) => { host(2, 0, status, text); };
  const names = JSON.parse(namesJSON);
  const stringify = JSON.stringify, parse = JSON.parse;
  const keys = Object.keys, getProto = Object.getPrototypeOf;
  const define = Object.defineProperty, freeze = Object.freeze, create = Object.create;
  const isArray = Array.isArray, ObjectProto = Object.prototype, ArrayProto = Array.prototype;
  const StringOf = String, ErrorCtor = Error;
  const Prom = Promise;

  class ToolCallError extends ErrorCtor {
    constructor(toolName, message) {
      super(message);
      define(this, "name", { value: "ToolCallError", configurable: true, writable: true });
      define(this, "toolName", { value: toolName, enumerable: true });
    }
  }

  // snap copies v, found at depth d (ks[0..d) are its root's name and the keys taken to reach
  // it), as lossless JSON (CODE-5): it reads every property once and throws a TypeError naming
  // the path of the first value JSON cannot carry exactly. seen[0..d-1) are the objects on the
  // way (the root first), for cycles. The path
  // is only put together for the error: building it for every value cost more than the copy.
  // The copy's objects have no prototype, so assigning a property defines it, with no setter to
  // find. The number tests use no builtin: v - v is 0 exactly for a finite v, and 1 / v is
  // -Infinity exactly for -0.
  function snap(v, d, ks, seen) {
    switch (typeof v) {
      case "string":
      case "boolean":
        return v;
      case "number":
        if (v - v !== 0) throw new TypeError(pathOf(ks, d) + " is " + StringOf(v) + ", which JSON cannot carry");
        if (v === 0 && 1 / v < 0) throw new TypeError(pathOf(ks, d) + " is -0, which JSON cannot carry");
        return v;
      case "object":
        if (v === null) return null;
        break;
      case "undefined":
        throw new TypeError(pathOf(ks, d) + " is undefined");
      default:
        throw new TypeError(pathOf(ks, d) + " is a " + typeof v + ", which JSON cannot carry");
    }
    for (let i = 0; i < d - 1; i++) {
      if (seen[i] === v) throw new TypeError(pathOf(ks, d) + " is a cycle");
    }
    seen[d - 1] = v;
    const proto = getProto(v);
    let out;
    if (isArray(v)) {
      if (proto !== ArrayProto) throw new TypeError(pathOf(ks, d) + " is not a plain array");
      out = [];
      const n = v.length;
      for (let i = 0; i < n; i++) {
        if (!(i in v)) throw new TypeError(pathOf(ks, d) + "[" + i + "] is a hole in a sparse array");
        ks[d] = i;
        out[i] = snap(v[i], d + 1, ks, seen);
      }
    } else {
      if (proto !== ObjectProto && proto !== null) throw new TypeError(pathOf(ks, d) + " is not a plain object");
      out = create(null);
      const own = keys(v);
      for (let i = 0; i < own.length; i++) {
        const k = own[i];
        ks[d] = k;
        out[k] = snap(v[k], d + 1, ks, seen);
      }
    }
    return out;
  }

  // pathOf is the path of the value snap reached at depth d: ks[0] is its root, then ".key" for
  // a property and "[i]" for an element.
  function pathOf(ks, d) {
    let path = ks[0];
    for (let i = 1; i < d; i++) {
      const k = ks[i];
      path += typeof k === "number" ? "[" + k + "]" : "." + k;
    }
    return path;
  }

  // lossless is the JSON of v's snapshot; root names v in the error.
  function lossless(v, root) {
    return stringify(snap(v, 1, [root], []));
  }

  // The calls in flight by id, which counts from 0 so that the arrays stay dense: the tool's
  // name and the resolve and reject of its promise. settle clears them.
  const callNames = [], resolvers = [], rejecters = [];
  let next = 0;

  function call(name, args) {
    let json;
    try {
      json = lossless(args, "arguments");
    } catch (e) {
      return Prom.reject(new ToolCallError(name, "arguments of " + name + " are not lossless JSON: " + (e && e.message)));
    }
    const id = next++;
    let resolve, reject;
    const p = new Prom(function (res, rej) { resolve = res; reject = rej; });
    callNames[id] = name;
    resolvers[id] = resolve;
    rejecters[id] = reject;
    const err = submit(id, name, json);
    if (err !== 0) {
      callNames[id] = resolvers[id] = rejecters[id] = undefined;
      return Prom.reject(new ToolCallError(name, err));
    }
    return p;
  }

  const tools = create(null);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    define(tools, name, { value: function (args) { return call(name, args); }, enumerable: true });
  }
  freeze(tools);

  function show(v) {
    if (typeof v === "string") return v;
    if (v instanceof ErrorCtor) return message(v);
    if (typeof v === "function") return "[Function" + (v.name ? " " + v.name : "") + "]";
    if (typeof v === "object" && v !== null) {
      try {
        const s = stringify(v);
        if (s !== undefined) return s;
      } catch (e) { /* fall through */ }
    }
    try { return StringOf(v); } catch (e) { return "[unprintable]"; }
  }

  function print() {
    let line = "";
    for (let i = 0; i < arguments.length; i++) line += (i ? " " : "") + show(arguments[i]);
    log(line);
  }
  const console = create(null);
  for (const m of ["log", "info", "warn", "error", "debug"]) define(console, m, { value: print, enumerable: true });
  freeze(console);

  define(g, "tools", { value: tools, enumerable: false });
  define(g, "console", { value: console, writable: true, configurable: true });
  define(g, "ToolCallError", { value: ToolCallError, writable: true, configurable: true });

  function message(e) {
    if (e instanceof ErrorCtor) {
      try { return StringOf(e.name) + ": " + StringOf(e.message); } catch (x) { return "<unprintable thrown value>"; }
    }
    try { return StringOf(e); } catch (x) { return "<unprintable thrown value>"; }
  }

  // start runs the program's main function; done reports its outcome once.
  function start(main) {
    let p;
    try {
      p = main();
    } catch (e) {
      done("error", message(e));
      return;
    }
    p.then(function (v) {
      if (v === undefined) {
        done("none", "");
        return;
      }
      let json;
      try {
        json = lossless(v, "result");
      } catch (e) {
        done("invalid-output", "the returned value is not lossless JSON: " + e.message);
        return;
      }
      done("ok", json);
    }, function (e) {
      done("error", message(e));
    });
  }

  // settle resolves (ok) or rejects binding id with the JSON value or failure message.
  function settle(id, ok, text) {
    const resolve = resolvers[id], reject = rejecters[id], name = callNames[id];
    if (resolve === undefined) return;
    callNames[id] = resolvers[id] = rejecters[id] = undefined;
    if (ok) resolve(parse(text));
    else reject(new ToolCallError(name, text));
  }

  return [start, settle];
})
