# Independent oracle for the code-context renderer, using CPython's own parser.
# For sampled simple statements of a file, prints the header lines that must be
# shown around them (required) and the line ranges headers may occupy (allowed).
import ast
import json
import sys

path, step = sys.argv[1], int(sys.argv[2])
tree = ast.parse(open(path, encoding="utf-8").read())
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
out = []


def header(node, body):
    return [node.lineno, max(node.lineno, body[0].lineno - 1)]


def gap_header(prev_end, body):
    # `else:` / `finally:` have no line in the AST: anywhere between the parts.
    return [prev_end + 1, max(prev_end + 1, body[0].lineno - 1)]


def is_elif(node):
    return len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and node.orelse[0].col_offset == node.col_offset


def parts(node, root=None):
    """(statements, required header lines, allowed ranges) of each part of a compound node."""
    if isinstance(node, DEFS):
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        yield node.body, sorted({start, node.lineno}), [[start, max(start, node.body[0].lineno - 1)]]
        return
    if isinstance(node, ast.Match):
        for case in node.cases:
            line = case.pattern.lineno
            yield case.body, [node.lineno, line], [header(node, [node.cases[0].pattern]), [line, max(line, case.body[0].lineno - 1)]]
        return
    main = header(node, node.body)
    head, head_allowed = root or (node.lineno, main)
    if root:
        yield node.body, [head, node.lineno], [head_allowed, main]
    else:
        yield node.body, [node.lineno], [main]
    prev_end = node.body[-1].end_lineno
    for h in getattr(node, "handlers", []):
        yield h.body, [node.lineno, h.lineno], [main, header(h, h.body)]
        prev_end = h.end_lineno
    orelse = getattr(node, "orelse", [])
    if isinstance(node, ast.If) and is_elif(node):
        # An `elif` is an If nested in `orelse` for the AST but a clause of the
        # first `if` for the renderer: lines under it need that `if` and this
        # `elif`, not the clauses before it.
        yield from parts(orelse[0], root=root or (node.lineno, main))
        return
    if orelse:
        yield orelse, [head], [head_allowed, gap_header(prev_end, orelse)]
        prev_end = orelse[-1].end_lineno
    final = getattr(node, "finalbody", [])
    if final:
        yield final, [node.lineno], [main, gap_header(prev_end, final)]


COMPOUND = DEFS + (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
if hasattr(ast, "TryStar"):
    COMPOUND += (ast.TryStar,)
counter = 0


def visit(stmts, required, allowed):
    global counter
    for s in stmts:
        if isinstance(s, COMPOUND):
            for body, req, allow in parts(s):
                visit(body, required + req, allowed + allow)
        else:
            counter += 1
            if counter % step == 0:
                out.append({"line": s.lineno, "required": required, "allowed": allowed})


visit(tree.body, [], [])
print(json.dumps(out))
