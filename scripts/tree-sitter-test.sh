#!/usr/bin/env bash
# Tests the tree-sitter grammar in tree-sitter-rondo/:
#   1. the parser sources committed there are what grammar.js generates;
#   2. tree-sitter's corpus tests (tree-sitter-rondo/test/corpus) pass;
#   3. every shipped workflow and fixture that rondo's own parser (pest) reads without
#      recovering from an error parses without an ERROR or MISSING node.
# Installs what it needs: the tree-sitter CLI (built from crates.io) and a C compiler.
# Run from anywhere; exits non-zero on the first step that fails.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
grammar=$root/tree-sitter-rondo

# The version the committed parser was generated with: another may generate other bytes.
TREE_SITTER_VERSION=0.27.1

# Installed beneath the target folder unless one on the PATH has that version: a build from
# source takes about 25 minutes on 2 cores, and CI keeps its target folder between runs.
tools=${RONDO_TOOLS_DIR:-${CARGO_TARGET_DIR:-$root/target}/tools}
export PATH="$tools/bin:$PATH"
if ! tree-sitter --version 2>/dev/null | grep -qx "tree-sitter $TREE_SITTER_VERSION"; then
  echo "installing tree-sitter-cli $TREE_SITTER_VERSION into $tools (a build from source: minutes)"
  env -u CARGO_TARGET_DIR cargo install --locked --quiet --root "$tools" tree-sitter-cli \
    --version "$TREE_SITTER_VERSION"
fi
if ! command -v cc >/dev/null 2>&1; then
  echo "installing a C compiler (tree-sitter compiles the parser)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq gcc >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq gcc >/dev/null
  fi
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# A configuration of our own: no user's grammars, no warning that none is configured.
mkdir "$scratch/parsers"
printf '{"parser-directories": ["%s"]}\n' "$scratch/parsers" >"$scratch/config.json"

echo "== generated sources are up to date"
# QuickJS inside the CLI reads grammar.js: no Node.js needed.
(cd "$grammar" && tree-sitter generate --abi 14 --js-runtime native --output "$scratch/src")
for file in parser.c grammar.json node-types.json tree_sitter/parser.h tree_sitter/alloc.h \
  tree_sitter/array.h; do
  if ! cmp -s "$scratch/src/$file" "$grammar/src/$file"; then
    echo "tree-sitter-rondo/src/$file differs from what grammar.js generates:" >&2
    echo "  run (cd tree-sitter-rondo && tree-sitter generate --abi 14 --js-runtime native)" >&2
    exit 1
  fi
done

echo "== corpus tests"
(cd "$grammar" && tree-sitter test --config-path "$scratch/config.json" --grammar-path .)

echo "== every workflow and fixture rondo parses, parsed by the grammar"
cargo build --quiet --bin rondo
rondo=${CARGO_TARGET_DIR:-$root/target}/debug/rondo
# Diagnostics that mean pest recovered from text it could not read (a Python `if` in a
# route is read as `when`, but it is not the language); the other syntax
# diagnostics name spellings the grammar accepts (and `rondo check` reports).
recovered='"rondo::syntax::(invalid_line|unclosed_block|unclosed_comment|unexpected|too_deep|expression|python_keyword)"'
accepted=$scratch/accepted
: >"$accepted"
skipped=0
while IFS= read -r -d '' file; do
  set +e
  report=$("$rondo" check --offline --format json "$file" 2>/dev/null)
  status=$?
  set -e
  # 2: not read at all (not UTF-8, say).
  if [ "$status" = 2 ] || grep -Eq "$recovered" <<<"$report"; then
    skipped=$((skipped + 1))
  else
    printf '%s\n' "$file" >>"$accepted"
  fi
done < <(find workflows tests/fixtures -name '*.rondo' -print0 | sort -z)
count=$(wc -l <"$accepted")
if [ "$count" -lt 100 ]; then
  echo "only $count files to parse: the search for workflows is broken" >&2
  exit 1
fi
if ! tree-sitter parse --config-path "$scratch/config.json" --grammar-path "$grammar" \
  --paths "$accepted" --quiet >"$scratch/parse.txt" 2>&1 ||
  grep -Eq 'ERROR|MISSING' "$scratch/parse.txt"; then
  cat "$scratch/parse.txt" >&2
  echo "the grammar fails on files rondo parses (above)" >&2
  exit 1
fi
echo "$count files parsed without an error ($skipped that rondo itself cannot read skipped)"
