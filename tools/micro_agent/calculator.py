#!/usr/bin/env python3
"""micro-agent `calculator` tool: a safe arithmetic evaluator.

Arguments (JSON object as the first argument, or on stdin): {"expression": "2*(3+5)"}

Constraints (reference: micro-agent.md, "Tools and safety"):
  - allow-listed operators only: + - * / // % ** (also written ^), unary + and -,
    parentheses, factorial as `n!` or `fact(n)`; no names, attributes, calls or other syntax
  - factorial argument: a non-negative integer <= 12
  - exponent bound: |exponent| <= 64 (unless the base is 0, 1 or -1)
  - AST node-count limit: at most 100 nodes
  - number magnitude cap: every literal and intermediate result |x| <= 1e18

Prints the standard tool result {status, tool_name, data, warnings, error, execution_time};
`data` is the observation the agent records: {"result": <number>} or {"error": "..."}.
Exit code 0 on success, 1 when the expression is rejected or fails.
"""
from __future__ import annotations

import ast
import json
import math
import operator
import re
import sys
import time

TOOL_NAME = "calculator"
MAX_FACTORIAL = 12
MAX_EXPONENT = 64
MAX_NODES = 100
MAX_MAGNITUDE = 1e18

BIN_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY_OPS = {ast.USub: operator.neg, ast.UAdd: operator.pos}
ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Call, ast.Name, ast.Load,
                 *BIN_OPS, *UNARY_OPS)


class CalcError(ValueError):
    pass


def read_args() -> dict:
    argv = sys.argv[1:]
    if argv and argv[0].lstrip().startswith("{"):
        return json.loads(argv[0])
    if argv:
        return {"expression": " ".join(argv)}
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}


def preprocess(expr: str) -> str:
    expr = re.sub(r"(\d+)\s*!", r"fact(\1)", expr)  # 9! -> fact(9)
    return expr.replace("^", "**")


def check_magnitude(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise CalcError("result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalcError(f"magnitude cap exceeded: |x| must be <= {MAX_MAGNITUDE:g}")
    return value


def factorial(value):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CalcError("factorial needs a non-negative integer")
    if value > MAX_FACTORIAL:
        raise CalcError(f"factorial argument must be <= {MAX_FACTORIAL}")
    return math.factorial(value)


def evaluate(node):
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalcError("only numeric literals are allowed")
        return check_magnitude(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPS:
        return check_magnitude(UNARY_OPS[type(node.op)](evaluate(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in BIN_OPS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT and abs(left) not in (0, 1):
            raise CalcError(f"exponent bound exceeded: |exponent| must be <= {MAX_EXPONENT}")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalcError("division by zero")
        return check_magnitude(BIN_OPS[type(node.op)](left, right))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fact"
            and len(node.args) == 1 and not node.keywords):
        return check_magnitude(factorial(evaluate(node.args[0])))
    raise CalcError(f"disallowed expression element: {type(node).__name__}")


def safe_eval(expression: str):
    tree = ast.parse(preprocess(expression), mode="eval")
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise CalcError(f"expression too large: {len(nodes)} AST nodes (limit {MAX_NODES})")
    for node in nodes:
        if not isinstance(node, ALLOWED_NODES):
            raise CalcError(f"disallowed expression element: {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id != "fact":
            raise CalcError(f"unknown name: {node.id}")
    result = evaluate(tree)
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return result


def main() -> int:
    started = time.monotonic()
    error = None
    data: dict
    try:
        args = read_args()
        extra = sorted(set(args) - {"expression"})
        if extra:
            raise CalcError(f"unexpected arguments: {', '.join(extra)}")
        if not isinstance(args.get("expression"), str) or not args["expression"].strip():
            raise CalcError("`expression` (a non-empty string) is required")
        data = {"result": safe_eval(args["expression"].strip())}
    except (CalcError, SyntaxError, ValueError, TypeError, OverflowError, ZeroDivisionError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        data = {"error": error}
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": TOOL_NAME,
        "data": data,
        "warnings": [],
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
