#!/usr/bin/env python3
"""The admission harness (charts/tests/vap.py) itself: each place where it follows the API server
rather than plain cel-python, checked on small policies, so that a harness that lost one of them
fails here rather than passing the chart's policies wrongly.

Usage: python3 charts/tests/vap_test.py        (exit 0 = every check holds)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vap  # noqa: E402


def policy(validations, *, variables=(), match_conditions=(), failure="Fail", actions=("Deny",),
           resources=("pods/status",), operations=("UPDATE",)) -> vap.Policy:
    obj = {"metadata": {"name": "p"}, "spec": {
        "failurePolicy": failure,
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": list(operations),
                                                "resources": list(resources)}]},
        "matchConditions": [{"name": f"m{i}", "expression": e}
                            for i, e in enumerate(match_conditions)],
        "variables": [{"name": n, "expression": e} for n, e in variables],
        "validations": [v if isinstance(v, dict) else {"expression": v, "message": "no"}
                        for v in validations]}}
    binding = {"metadata": {"name": "b"}, "spec": {"policyName": "p",
                                                   "validationActions": list(actions)}}
    return vap.Policy(obj, [binding])


def request(obj=None, old=None, **kw) -> vap.Request:
    base = dict(username="u", operation="UPDATE", group="", version="v1", resource="pods",
                subresource="status", name="x", namespace="n", kind="Pod",
                obj=obj if obj is not None else {"status": {}},
                old=old if old is not None else {"status": {}})
    base.update(kw)
    return vap.Request(**base)


CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def refused(text, variables=()) -> str:
    try:
        vap.compile_expr(text, list(variables))
    except vap.CompileError as e:
        return str(e)
    raise AssertionError(f"{text!r} compiled")


@check
def compile_refuses_what_the_api_server_refuses():
    assert "undeclared reference to 'podward'" in refused("podward.io/ready")
    assert "undefined field 'subresource'" in refused("request.subresource == 'status'")
    assert "undefined field 'later'" in refused("variables.later", ["earlier"])
    assert "syntax error" in refused("object.a ==")
    assert "not implemented by this harness" in refused("'a'.lowerAscii() == 'a'")
    assert "not implemented by this harness" in refused("object.?a.orValue(1) == 1")
    assert "not implemented by this harness" in refused("authorizer.group('').check('x')")
    assert "argument is not an identifier" in refused("[1].all(1, true)")
    vap.compile_expr("'podward.io/ready'", [])
    vap.compile_expr("variables.earlier && [1].all(x, x == 1)", ["earlier"])


@check
def has_on_a_missing_parent_is_an_error_not_false():
    # cel-go: has(object.spec.x) with no `spec` is "no such key"; celpy alone answers false.
    p = policy(["!has(object.spec.readinessGates)"])
    d = p.admit(request(obj={"status": {}}))
    assert d.denied and "resulted in error" in d.denied[0], d


@check
def errors_are_absorbed_by_logical_operators():
    p = policy(["true || object.nope.x == 1", "!(false && object.nope.x == 1)",
                "true || (object.a.b && object.c.d)"])
    assert not p.admit(request()).denied


@check
def equality_across_types_is_false_not_an_error():
    p = policy(["!(object.status.a == 'x')", "object.status.a != 'x'", "[1] != ['1']",
                "object.status.a == 1.0"])
    d = p.admit(request(obj={"status": {"a": 1}}))
    assert not d.denied, d


@check
def the_request_omits_empty_fields_as_the_api_server_does():
    p = policy(["!has(request.subResource)", "has(request.resource.group)",
                "!has(request.userInfo.extra)"], resources=("pods",))
    assert not p.admit(request(subresource="")).denied
    d = p.admit(request(subresource="", extra={"k": ["v"]}))
    assert len(d.denied) == 1 and "no" in d.denied[0], d


@check
def match_constraints_tell_subresources_and_operations_apart():
    p = policy(["false"])
    assert not p.admit(request(subresource="")).applies  # pods, rule names pods/status
    assert not p.admit(request(operation="CREATE")).applies
    assert p.admit(request()).applies
    star = policy(["false"], resources=("pods/*",), operations=("*",))
    assert star.admit(request(subresource="eviction", operation="CREATE")).applies
    assert not star.admit(request(subresource="")).applies


@check
def a_false_match_condition_skips_an_erroring_one_fails_by_failure_policy():
    assert not policy(["false"], match_conditions=["object.nope.x", "false"]).admit(
        request()).applies
    d = policy(["true"], match_conditions=["object.nope.x"]).admit(request())
    assert d.denied and "matchCondition 'm0' resulted in error" in d.denied[0], d
    assert not policy(["true"], match_conditions=["object.nope.x"], failure="Ignore").admit(
        request()).applies


@check
def failure_policy_ignore_lets_an_erroring_validation_pass():
    assert not policy(["object.nope.x"], failure="Ignore").admit(request()).denied
    assert policy(["object.nope.x"], failure="Fail").admit(request()).denied


@check
def a_non_bool_validation_is_an_error():
    assert policy(["'yes'"]).admit(request()).denied


@check
def variables_are_in_order_and_an_error_stays_with_its_users():
    p = policy(["variables.a == 1", "variables.b == 2", "true || variables.bad"],
               variables=[("a", "1"), ("b", "variables.a + 1"), ("bad", "object.nope.x")])
    assert not p.admit(request()).denied
    p = policy(["variables.bad == 1"], variables=[("bad", "object.nope.x")])
    assert "resulted in error" in p.admit(request()).denied[0]


@check
def message_expression_then_message_then_the_expression():
    p = policy([{"expression": "false", "messageExpression": "'got ' + object.status.a"},
                {"expression": "false", "messageExpression": "object.nope", "message": "fixed"},
                {"expression": "1 == 2"}])
    got = p.admit(request(obj={"status": {"a": "x"}})).denied
    assert [m.split("denied request: ")[1] for m in got] == [
        "got x", "fixed", "failed expression: 1 == 2"], got


@check
def validation_actions_deny_warn_audit():
    d = policy(["false"], actions=("Warn", "Audit")).admit(request())
    assert not d.denied and d.warnings and d.audit, d


@check
def a_message_with_a_line_break_is_refused():
    try:
        policy([{"expression": "true", "message": "a\nb"}])
    except vap.CompileError as e:
        assert "line breaks" in str(e)
    else:
        raise AssertionError("a two-line message compiled")


def main() -> int:
    passed = failed = 0
    for engine in vap.ENGINES:
        vap.ENGINE = engine
        for fn in CHECKS:
            try:
                fn()
                passed += 1
            except AssertionError as e:
                failed += 1
                print(f"FAIL [{engine}] {fn.__name__}: {e}")
    print(f"vap: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
