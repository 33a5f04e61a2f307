"""ValidatingAdmissionPolicy evaluation as the Kubernetes API server does it, with two real CEL
implementations: PyPI `cel-python` (module `celpy`, pure Python; its parse tree serves the
compile checks) and PyPI `common-expression-language` (module `cel`, the Rust `cel` crate). Every
expression must parse in both, and charts/tests/policies.py requires both to give every case its
verdict, so that neither's leniency can pass a policy.

What the API server does, and what this module does for it:
- **Compile** (at policy create; a failure refuses the policy, and `helm install` fails): every
  expression is parsed, and every identifier must be a declared variable (`object`, `oldObject`,
  `request`, `params`, `namespaceObject`, `variables`, `authorizer`) or a macro's own; every
  `variables.x` must name a variable declared before it; every `request.x...` a field of
  `admission.k8s.io/v1` AdmissionRequest; every function one of CEL's standard library. The
  Kubernetes CEL libraries (lists, regex, urls, quantity, optionals, authorizer, ...) are not
  implemented here: an expression calling one is refused with a message saying so, never
  evaluated wrongly. The object fields of a `message` must be one line.
- **Bindings**: `object`/`oldObject` are the objects as unstructured JSON (`null` on CREATE /
  DELETE respectively), `request` the AdmissionRequest as unstructured JSON (empty fields omitted,
  as Go's `omitempty` does: a request without a subresource has no `subResource`),
  `params` null (no paramKind), `namespaceObject` the namespace or null, `variables` the
  policy's variables in order, each an error value when its expression failed (an error surfaces
  only where it is used, as with Kubernetes' lazy variables).
- **Semantics** patched onto celpy where it differs from cel-go (the Rust engine has them): `has(e.f)` is an error when `e` is
  an error or not a map (celpy answers false); `==`/`!=` across types are false, not errors
  (cel-go's heterogeneous equality).
- **Admission**: matchConstraints (resourceRules with subresources, operations, groups,
  versions; excludeResourceRules), matchConditions (any false: the policy does not apply; an error
  and no false: failurePolicy), validations (each must be true; messageExpression, else message,
  else "failed expression"), an evaluation error resolved by failurePolicy, and the bindings'
  validationActions (Deny, Warn, Audit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import cel as cel_rust
import celpy
import celpy.celtypes as ct
import lark
from celpy.evaluation import CELEvalError, Evaluator

DECLARED = {"object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"}
NOT_IMPLEMENTED_VARS = {"authorizer": "the authorizer library (authorizer.check)"}
MACROS = {"all", "exists", "exists_one", "map", "filter"}
# CEL's standard functions, as global functions and as methods.
GLOBAL_FUNCTIONS = {"size", "int", "uint", "double", "string", "bytes", "bool", "type", "dyn",
                    "has", "matches", "duration", "timestamp"}
METHODS = {"size", "contains", "startsWith", "endsWith", "matches"}
# Kubernetes' CEL libraries and cel-go's extensions the API server enables: refused by name.
KUBERNETES_LIBRARY = {
    "lowerAscii", "upperAscii", "split", "join", "indexOf", "lastIndexOf", "substring", "trim",
    "replace", "charAt", "format", "quote", "reverse", "isSorted", "sum", "min", "max", "indexOf",
    "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery",
    "quantity", "isQuantity", "ip", "isIP", "cidr", "isCIDR", "semver", "isSemver", "optional",
    "orValue", "value", "hasValue", "or", "of", "none", "ofNonZeroValue", "sets", "contains",
    "containsAll", "intersects", "equivalent", "sort", "sortBy", "distinct", "flatten", "range",
    "slice", "first", "last", "transformList", "transformMap", "transformMapEntry",
    "existsOne", "check", "path", "group", "resource", "subresource", "namespace", "name",
    "allowed", "reason", "errored", "error", "serviceAccount", "fieldSelector", "labelSelector",
}

# admission.k8s.io/v1 AdmissionRequest, the fields CEL may select (None: a leaf or a map).
REQUEST_FIELDS: dict = {
    "uid": None,
    "kind": {"group": None, "version": None, "kind": None},
    "resource": {"group": None, "version": None, "resource": None},
    "subResource": None,
    "requestKind": {"group": None, "version": None, "kind": None},
    "requestResource": {"group": None, "version": None, "resource": None},
    "requestSubResource": None,
    "name": None,
    "namespace": None,
    "operation": None,
    "userInfo": {"username": None, "uid": None, "groups": None, "extra": None},
    "dryRun": None,
    "options": None,
}

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CompileError(Exception):
    """An expression the API server would refuse (or this harness cannot evaluate faithfully)."""


# --- semantics of cel-go that celpy lacks ---------------------------------------------------

def _has(self: Evaluator, exprlist: lark.Tree):
    node = exprlist.children[0] if exprlist.children else None
    while isinstance(node, lark.Tree) and node.data != "member_dot" and len(node.children) == 1:
        node = node.children[0]
    if not (isinstance(node, lark.Tree) and node.data == "member_dot"):
        return CELEvalError("invalid argument to has() macro")
    operand = self.visit(node.children[0])
    name = node.children[1].value
    if isinstance(operand, CELEvalError):
        return operand
    if isinstance(operand, ct.MapType):
        return ct.BoolType(ct.StringType(name) in operand)
    return CELEvalError(f"no such overload: has() on {type(operand).__name__}")


Evaluator.macro_has_eval = _has  # type: ignore[method-assign]
# celpy's repr of an error dumps its parse tree and can fail doing so (IndexError), which turns
# `true || (error && error)` into an exception instead of `true`.
CELEvalError.__repr__ = lambda self: f"CELEvalError({self.args[0] if self.args else ''!r})"  # type: ignore[method-assign]

_NUMERIC = (ct.IntType, ct.UintType, ct.DoubleType)


def _heq(a, b) -> bool:
    if isinstance(a, CELEvalError) or isinstance(b, CELEvalError):
        raise _Propagate(a if isinstance(a, CELEvalError) else b)
    if isinstance(a, _NUMERIC) and isinstance(b, _NUMERIC):
        return float(a) == float(b) if (isinstance(a, ct.DoubleType) or isinstance(b, ct.DoubleType)) \
            else int(a) == int(b)
    if isinstance(a, ct.BoolType) != isinstance(b, ct.BoolType):
        return False
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, ct.ListType) and isinstance(b, ct.ListType):
        return len(a) == len(b) and all(_heq(x, y) for x, y in zip(a, b))
    if isinstance(a, ct.MapType) and isinstance(b, ct.MapType):
        if len(a) != len(b):
            return False
        for k, v in a.items():
            match = [bv for bk, bv in b.items() if _heq(bk, k)]
            if not match or not _heq(v, match[0]):
                return False
        return True
    if type(a) is not type(b):
        return False
    return bool(a == b)


class _Propagate(Exception):
    def __init__(self, err):
        self.err = err


def _eq(a, b):
    try:
        return ct.BoolType(_heq(a, b))
    except _Propagate as p:
        return p.err


def _ne(a, b):
    r = _eq(a, b)
    return r if isinstance(r, CELEvalError) else ct.BoolType(not r)


FUNCTIONS = {"_==_": _eq, "_!=_": _ne}

# --- compile ------------------------------------------------------------------------------------

_ENV = celpy.Environment()


def _first_ident(tree) -> str | None:
    """The identifier an `expr` subtree is, when it is just one (a macro's variable)."""
    node = tree
    while isinstance(node, lark.Tree) and node.data != "ident" and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        return node.children[0].value
    return None


def _select_path(tree) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"] when `tree` is a chain of selections on an identifier."""
    if not isinstance(tree, lark.Tree):
        return None
    if tree.data in ("member", "primary") and len(tree.children) == 1:
        return _select_path(tree.children[0])
    if tree.data == "ident":
        return [tree.children[0].value]
    if tree.data == "member_dot":
        base = _select_path(tree.children[0])
        return None if base is None else base + [tree.children[1].value]
    return None


def _check(tree, scope: frozenset, variables: list[str], errors: list[str]) -> None:
    if isinstance(tree, lark.Token):
        return
    data = tree.data
    if data == "ident":
        name = tree.children[0].value
        if name in scope:
            return
        if name in NOT_IMPLEMENTED_VARS:
            errors.append(f"{NOT_IMPLEMENTED_VARS[name]} is not implemented by this harness")
        elif name not in DECLARED:
            errors.append(f"undeclared reference to '{name}'")
        return
    if data == "member_dot":
        path = _select_path(tree)
        if path and path[0] not in scope:
            if path[0] == "variables" and len(path) > 1 and path[1] not in variables:
                errors.append(f"undefined field '{path[1]}' (variables declared before this "
                              f"expression: {variables})")
            if path[0] == "request":
                fields = REQUEST_FIELDS
                for part in path[1:]:
                    if fields is None:
                        break
                    if part not in fields:
                        errors.append(f"undefined field '{part}' of the admission request")
                        break
                    fields = fields[part]
        _check(tree.children[0], scope, variables, errors)
        return
    if data in ("member_dot_arg", "dot_ident_arg"):
        target, name_tok = tree.children[0], tree.children[1]
        args = tree.children[2].children if len(tree.children) > 2 else []
        name = name_tok.value
        if data == "dot_ident_arg":
            errors.append(f"leading-dot function call .{name}() is not supported")
            return
        _check(target, scope, variables, errors)
        if name in MACROS:
            want = 2
            if len(args) != want:
                errors.append(f"macro {name}() with {len(args)} arguments is not supported "
                              f"by this harness (two: a variable and an expression)")
                return
            var = _first_ident(args[0])
            if var is None:
                errors.append(f"argument is not an identifier in {name}() macro")
                return
            _check(args[1], scope | {var}, variables, errors)
            return
        if name in METHODS:
            for a in args:
                _check(a, scope, variables, errors)
            return
        if name in KUBERNETES_LIBRARY:
            errors.append(f"function '{name}' of Kubernetes' CEL libraries is not implemented "
                          f"by this harness: rewrite the expression with CEL's standard library "
                          f"or implement it in charts/tests/vap.py")
        else:
            errors.append(f"undeclared reference to '{name}'")
        return
    if data == "ident_arg":
        name = tree.children[0].value
        args = tree.children[1].children if len(tree.children) > 1 else []
        if name not in GLOBAL_FUNCTIONS:
            if name in KUBERNETES_LIBRARY:
                errors.append(f"function '{name}' of Kubernetes' CEL libraries is not "
                              f"implemented by this harness")
            else:
                errors.append(f"undeclared reference to '{name}'")
        if name == "has" and (len(args) != 1 or _select_path_any(args[0]) is None):
            errors.append("invalid argument to has() macro")
        for a in args:
            _check(a, scope, variables, errors)
        return
    if data == "dot_ident":
        errors.append("leading-dot identifiers are not supported")
        return
    for child in tree.children:
        _check(child, scope, variables, errors)


def _select_path_any(tree):
    node = tree
    while isinstance(node, lark.Tree) and node.data != "member_dot" and len(node.children) == 1:
        node = node.children[0]
    return node if isinstance(node, lark.Tree) and node.data == "member_dot" else None


@dataclass
class Compiled:
    """One compiled expression: cel-python's program and the second engine's."""

    text: str
    program: object
    rust: object = None


def compile_expr(text: str, variables: list[str]) -> Compiled:
    """Compiles `text` as the API server would (see the module doc), or raises CompileError."""
    if "optional" in text or ".?" in text or "?." in text:
        if re.search(r"\.\?|\[\?|\boptional\.", text):
            raise CompileError(f"{text!r}: optional syntax (.?, [?], optional.*) is not "
                               f"implemented by this harness")
    try:
        ast = _ENV.compile(text)
    except celpy.CELParseError as e:
        raise CompileError(f"{text!r}: syntax error: {e}") from None
    errors: list[str] = []
    _check(ast, frozenset(), variables, errors)
    if errors:
        raise CompileError(f"{text!r}: " + "; ".join(dict.fromkeys(errors)))
    try:
        rust = cel_rust.compile(text)
    except Exception as e:  # noqa: BLE001  (the binding raises ValueError or RuntimeError)
        raise CompileError(f"{text!r}: common-expression-language: {e}") from None
    return Compiled(text, _ENV.program(ast, functions=FUNCTIONS), rust)


# --- values ---------------------------------------------------------------------------------


def to_cel(value):
    """Unstructured JSON (Python) to CEL values."""
    if value is None:
        return None
    return celpy.json_to_cel(value)


def _result(value):
    """A CEL result as plain Python, or the error."""
    if isinstance(value, CELEvalError):
        return value
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, ct.StringType):
        return str(value)
    return value


ENGINES = ("cel-python", "common-expression-language")
# The engine Policy.admit uses unless told.
ENGINE = ENGINES[0]


def evaluate_rust(c: Compiled, activation: dict):
    """`c` by the second engine (PyPI `common-expression-language`, the Rust `cel` crate)."""
    try:
        return c.rust.execute(activation)
    except Exception as e:  # noqa: BLE001  (its evaluation errors are plain exceptions)
        return CELEvalError(str(e))


def evaluate(c: Compiled, activation: dict):
    try:
        out = c.program.evaluate(activation)
    except CELEvalError as e:
        return e
    except Exception as e:  # noqa: BLE001  (celpy raises plain exceptions for some overload errors)
        return CELEvalError(f"{type(e).__name__}: {e}")
    return _result(out)


# --- policies -----------------------------------------------------------------------------


@dataclass
class Request:
    """One admission request: who, what, and the objects (unstructured JSON)."""

    username: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    resource: str
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    kind: str = ""
    groups: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    obj: dict | None = None
    old: dict | None = None
    namespace_object: dict | None = None

    def unstructured(self) -> dict:
        """The AdmissionRequest as the API server converts it for CEL (empty fields omitted)."""
        # metav1.GroupVersionKind/Resource serialise every field, the core group as "".
        gvk = {"group": self.group, "version": self.version, "kind": self.kind}
        gvr = {"group": self.group, "version": self.version, "resource": self.resource}
        user: dict = {"username": self.username}
        if self.groups:
            user["groups"] = list(self.groups)
        if self.extra:
            user["extra"] = {k: list(v) for k, v in self.extra.items()}
        r = {"uid": "00000000-0000-0000-0000-0000000000aa", "kind": gvk, "resource": gvr,
             "requestKind": dict(gvk), "requestResource": dict(gvr), "operation": self.operation,
             "userInfo": user, "dryRun": False}
        if self.subresource:
            r["subResource"] = self.subresource
            r["requestSubResource"] = self.subresource
        if self.name:
            r["name"] = self.name
        if self.namespace:
            r["namespace"] = self.namespace
        return r


def _listed(values: list, want: str) -> bool:
    return "*" in values or want in values


def _rule_matches(rule: dict, req: Request) -> bool:
    if not _listed(rule.get("apiGroups", []), req.group):
        return False
    if not _listed(rule.get("apiVersions", []), req.version):
        return False
    if not _listed(rule.get("operations", []), req.operation):
        return False
    names = rule.get("resourceNames") or []
    if names and req.name not in names:
        return False
    for r in rule.get("resources", []):
        res, _, sub = r.partition("/")
        if res not in ("*", req.resource):
            continue
        if not sub and not req.subresource:
            return True
        # "pods/*": every subresource of pods, not pods itself.
        if sub and req.subresource and (sub == "*" or sub == req.subresource):
            return True
    return False


@dataclass
class Decision:
    """What one policy, through its bindings, does to one request."""

    applies: bool
    denied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)


class Policy:
    """A compiled ValidatingAdmissionPolicy with its bindings' actions."""

    def __init__(self, obj: dict, bindings: list[dict]):
        self.name = obj["metadata"]["name"]
        spec = obj["spec"]
        self.spec = spec
        for key in ("paramKind",):
            if spec.get(key):
                raise CompileError(f"{self.name}: {key} is not implemented by this harness")
        mc = spec.get("matchConstraints") or {}
        for key in ("namespaceSelector", "objectSelector"):
            sel = mc.get(key) or {}
            if sel.get("matchLabels") or sel.get("matchExpressions"):
                raise CompileError(f"{self.name}: matchConstraints.{key} is not implemented here")
        if not mc.get("resourceRules"):
            raise CompileError(f"{self.name}: spec.matchConstraints.resourceRules: Required value")
        self.failure_policy = spec.get("failurePolicy", "Fail")
        if self.failure_policy not in ("Fail", "Ignore"):
            raise CompileError(f"{self.name}: failurePolicy {self.failure_policy!r}")
        self.variables: list[tuple[str, Compiled]] = []
        names: list[str] = []
        errors: list[str] = []

        def comp(text: str, where: str):
            try:
                return compile_expr(text, list(names))
            except CompileError as e:
                errors.append(f"{self.name}: {where}: {e}")
                return None

        for i, mcnd in enumerate(spec.get("matchConditions") or []):
            if not mcnd.get("name"):
                errors.append(f"{self.name}: matchConditions[{i}].name: Required value")
        self.match_conditions = [(m.get("name", ""), comp(m["expression"], f"matchConditions[{i}]"))
                                 for i, m in enumerate(spec.get("matchConditions") or [])]
        for i, v in enumerate(spec.get("variables") or []):
            if not IDENT.match(v.get("name", "")):
                errors.append(f"{self.name}: variables[{i}].name {v.get('name')!r} is not a CEL "
                              f"identifier")
            c = comp(v["expression"], f"variables[{i}] ({v.get('name')})")
            self.variables.append((v["name"], c))
            names.append(v["name"])
        self.validations = []
        for i, v in enumerate(spec.get("validations") or []):
            msg = v.get("message")
            if msg is not None and ("\n" in msg or "\r" in msg):
                errors.append(f"{self.name}: validations[{i}].message: must not contain line "
                              f"breaks")
            self.validations.append((
                comp(v["expression"], f"validations[{i}].expression"),
                msg,
                comp(v["messageExpression"], f"validations[{i}].messageExpression")
                if v.get("messageExpression") else None,
                v["expression"],
            ))
        self.audit_annotations = [(a["key"], comp(a["valueExpression"], f"auditAnnotations[{i}]"))
                                  for i, a in enumerate(spec.get("auditAnnotations") or [])]
        if not self.validations and not self.audit_annotations:
            errors.append(f"{self.name}: spec: one of validations or auditAnnotations is required")
        if errors:
            raise CompileError("\n".join(errors))
        self.actions: list[str] = []
        for b in bindings:
            if b["spec"].get("matchResources") or b["spec"].get("paramRef"):
                raise CompileError(f"{b['metadata']['name']}: matchResources/paramRef are not "
                                   f"implemented by this harness")
            self.actions.extend(b["spec"].get("validationActions") or [])

    def matches(self, req: Request) -> bool:
        mc = self.spec["matchConstraints"]
        if not any(_rule_matches(r, req) for r in mc.get("resourceRules", [])):
            return False
        return not any(_rule_matches(r, req) for r in mc.get("excludeResourceRules") or [])

    def admit(self, req: Request, engine: str | None = None) -> Decision:
        """The API server's verdict of this policy on `req` (see the module doc), the CEL
        evaluated by `engine` (one of ENGINES). The second engine has no error values: a variable
        whose expression failed is left out of `variables`, so that using it is an error too."""
        if not self.matches(req) or not self.actions:
            return Decision(applies=False)
        rust = (engine or ENGINE) == ENGINES[1]
        conv = (lambda v: v) if rust else to_cel
        ev = evaluate_rust if rust else evaluate
        activation = {
            "object": conv(req.obj),
            "oldObject": conv(req.old),
            "request": conv(req.unstructured()),
            "params": None,
            "namespaceObject": conv(req.namespace_object),
        }
        failures: list[str] = []
        errored = []
        for name, c in self.match_conditions:
            r = ev(c, activation)
            if r is False:
                return Decision(applies=False)
            if not isinstance(r, bool):
                errored.append(f"matchCondition {name!r} resulted in error: {errtext(r)}")
        if errored:
            if self.failure_policy == "Ignore":
                return Decision(applies=False)
            failures.extend(errored)
        else:
            values: dict = {}
            for name, c in self.variables:
                if rust:
                    activation["variables"] = dict(values)
                    r = evaluate_rust(c, activation)
                    if not isinstance(r, CELEvalError):
                        values[name] = r
                else:
                    activation["variables"] = ct.MapType(values)
                    values[ct.StringType(name)] = evaluate_value(c, activation)
            activation["variables"] = dict(values) if rust else ct.MapType(values)
            for c, msg, msg_expr, text in self.validations:
                r = ev(c, activation)
                if r is True:
                    continue
                if r is False:
                    failures.append(self._message(msg, msg_expr, text, activation, ev))
                elif isinstance(r, CELEvalError) or not isinstance(r, bool):
                    if self.failure_policy == "Fail":
                        why = errtext(r) if isinstance(r, CELEvalError) else f"{r!r} is not a bool"
                        failures.append(f"expression '{text}' resulted in error: {why}")
        d = Decision(applies=True)
        if failures:
            prefix = f"ValidatingAdmissionPolicy '{self.name}' denied request: "
            if "Deny" in self.actions:
                d.denied = [prefix + f for f in failures]
            if "Warn" in self.actions:
                d.warnings = [f"Validation failed for ValidatingAdmissionPolicy '{self.name}': {f}"
                              for f in failures]
            if "Audit" in self.actions:
                d.audit = list(failures)
        return d

    @staticmethod
    def _message(msg, msg_expr, text, activation, ev) -> str:
        if msg_expr is not None:
            m = ev(msg_expr, activation)
            if isinstance(m, str) and m.strip() and "\n" not in m:
                return m.strip()
        if msg:
            return msg
        return f"failed expression: {text}"


def errtext(e: CELEvalError) -> str:
    """An evaluation error's message, without celpy's internals."""
    return str(e.args[0]) if e.args else "error"


def evaluate_value(c: Compiled, activation: dict):
    """A variable's value in CEL form (an error stays an error value)."""
    try:
        return c.program.evaluate(activation)
    except CELEvalError as e:
        return e
    except Exception as e:  # noqa: BLE001
        return CELEvalError(f"{type(e).__name__}: {e}")


def policies(objects: list[dict]) -> tuple[list[Policy], list[str]]:
    """Every ValidatingAdmissionPolicy of a render, compiled; and the compile errors."""
    bindings: dict[str, list[dict]] = {}
    for o in objects:
        if o.get("kind") == "ValidatingAdmissionPolicyBinding":
            bindings.setdefault(o["spec"]["policyName"], []).append(o)
    out, errors = [], []
    for o in objects:
        if o.get("kind") != "ValidatingAdmissionPolicy":
            continue
        try:
            out.append(Policy(o, bindings.get(o["metadata"]["name"], [])))
        except CompileError as e:
            errors.append(str(e))
    names = {p.name for p in out} | {o["metadata"]["name"] for o in objects
                                     if o.get("kind") == "ValidatingAdmissionPolicy"}
    for name in bindings:
        if name not in names:
            errors.append(f"binding(s) {[b['metadata']['name'] for b in bindings[name]]} name "
                          f"policy {name!r}, which the chart does not render")
    return out, errors
