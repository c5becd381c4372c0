#!/usr/bin/env python3
"""Generates stress inputs for `rondo check` (bench/check_scale.sh, tests/check_scale.rs).

    python3 bench/check_scale/gen.py KIND N OUT

KIND is one of:
  exits   N exits sharing code 1 (a warning each), each reached by its own route from one tool role
  roles   N builtin roles in a chain (start -> r0 -> r1 -> ... -> success)
  routes  N routes out of one tool role, each to its own builtin role, all to success
  deep    an exit condition nesting N parentheses
  chain   a condition of N `and`-joined comparisons, and a sum of N terms
"""

import sys


def exits(n):
    out = ["workflow w {\n}", 'role work: tool {\n  command = ["true"]\n}', "start -> work"]
    out += [f"work -> e{i} when work.exit_code == {i}" for i in range(n)]
    out += ["work -> success otherwise", "exit success"]
    out += [f"exit e{i} {{ code = 1 }}" for i in range(n)]
    return out


def roles(n):
    out = ["workflow w {\n}", "memory {\n  k: int = 0\n}", "start -> r0"]
    for i in range(n):
        out.append(f"role r{i}: builtin {{\n  update {{\n    set k = {i}\n  }}\n}}")
        out.append(f"r{i} -> {'r%d' % (i + 1) if i + 1 < n else 'success'}")
    out.append("exit success")
    return out


def routes(n):
    out = ["workflow w {\n}", "memory {\n  k: int = 0\n}", 'role work: tool {\n  command = ["true"]\n}', "start -> work"]
    for i in range(n):
        out.append(f"role b{i}: builtin {{\n  update {{\n    set k = {i}\n  }}\n}}")
        out.append(f"work -> b{i} when work.exit_code == {i}")
        out.append(f"b{i} -> success")
    out += ["work -> success otherwise", "exit success"]
    return out


def deep(n):
    cond = "(" * n + "work.ok" + ")" * n
    return ["workflow w {\n}", 'role work: tool {\n  command = ["true"]\n}', "start -> work",
            f"work -> success when {cond}", "work -> failed otherwise",
            "exit success", "exit failed { code = 1 }"]


def chain(n):
    cond = " and ".join(f"work.exit_code != {i}" for i in range(n))
    total = " + ".join(str(i) for i in range(n))
    return ["workflow w {\n}", "memory {\n  k: int = 0\n}", 'role work: tool {\n  command = ["true"]\n}',
            f"role sum: builtin {{\n  update {{\n    set k = {total}\n  }}\n}}",
            "start -> work", f"work -> sum when {cond}", "work -> failed otherwise", "sum -> success",
            "exit success", "exit failed { code = 1 }"]


def main():
    kind, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    lines = {"exits": exits, "roles": roles, "routes": routes, "deep": deep, "chain": chain}[kind](n)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
