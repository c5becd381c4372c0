//! `rondo lsp`: a language server over standard input and output.
//!
//! Every edit of a `.rondo` file (and of a `.tera` template a workflow renders) is parsed,
//! compiled and checked by the same pipeline as `rondo check`, and its diagnostics are
//! published with the same codes and help. The server answers hover, definition,
//! references, rename, completion, document symbols, formatting (`rondo fmt`) and
//! semantic tokens. It is synchronous: edits that arrive together are checked once, after
//! the last of them.

mod analysis;
mod complete;
mod features;
mod index;
mod position;
mod probe;
mod server;
mod symbols;
mod tera;
mod tokens;

pub use server::{Options, serve};

/// Words of the language (highlighted as keywords where they name nothing declared).
const KEYWORDS: &[&str] = &[
    "and",
    "answer",
    "artifact",
    "backtrack",
    "builtin",
    "code",
    "code_context",
    "contains",
    "conversation",
    "environment",
    "exit",
    "expect",
    "false",
    "history",
    "import",
    "json",
    "llm",
    "max",
    "memory",
    "not",
    "null",
    "or",
    "otherwise",
    "output",
    "over",
    "parallel",
    "path",
    "provider",
    "providers",
    "reply",
    "role",
    "set",
    "tagged",
    "test",
    "text",
    "tool",
    "true",
    "type",
    "update",
    "visit",
    "when",
    "whiteboard",
    "workflow",
];

/// The signature of an expression function: its parameters, its result and what it does.
/// The names and their arity are the compiler's ([`probe::functions`]); a test keeps the two
/// in step.
fn signature(name: &str) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match name {
        "len" => (
            "value: list | map | string",
            "int",
            "the number of items, or of characters",
        ),
        "contains" => (
            "container: list | map | string, value",
            "bool",
            "whether the list holds the value, the map or object has the key, the string the substring",
        ),
        "matches" => (
            "text: string, regex: \"literal\"",
            "bool",
            "whether the text matches the regular expression (Rust `regex` syntax, written as a string literal)",
        ),
        "visits" => ("role", "int", "how many times the role has run so far"),
        "used" => (
            "tool",
            "bool",
            "whether the tool has been called in this run",
        ),
        "exists" => (
            "path: string",
            "bool",
            "whether the file exists in the run's workspace",
        ),
        "first" => (
            "list: list[T]",
            "T?",
            "the first item, null for an empty list",
        ),
        "last" => (
            "list: list[T]",
            "T?",
            "the last item, null for an empty list",
        ),
        "at" => (
            "list: list[T], index: int",
            "T?",
            "the item at the index (from 0), null past the end",
        ),
        "json" => ("value", "string", "the value as JSON text"),
        "lower" => ("text: string", "string", "the text in lower case"),
        "now" => ("", "string", "the current time (RFC 3339)"),
        "if" => (
            "condition: bool, then: T, else: U",
            "T | U",
            "`then` when the condition holds, else `else`",
        ),
        "all" => (
            "values: list[bool] | map[bool]",
            "bool",
            "whether every value is true",
        ),
        "without" => (
            "list: list[T], done: list | map",
            "list[T]",
            "the items of the list not in `done` (for a map: not true in it)",
        ),
        "shell_reads" => (
            "command: string, output: string, root: string",
            "list[any]",
            "the files a shell command read, as found in its output, below `root`",
        ),
        "repo_path" => (
            "file: string, root: string",
            "string?",
            "the file's path relative to the repository at `root`, null outside it",
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_of_the_compiler_has_a_signature_of_its_arity() {
        let functions = probe::functions();
        assert!(!functions.is_empty());
        for (name, arity) in functions {
            let (params, _, _) =
                signature(name).unwrap_or_else(|| panic!("no signature for `{name}`"));
            let count = if params.is_empty() {
                0
            } else {
                params.split(", ").count()
            };
            assert_eq!(count, *arity, "`{name}`: {params}");
        }
    }
}
