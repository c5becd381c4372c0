//! What the compiler accepts, asked of the compiler itself: the attributes of each kind of
//! block and the expression functions with their arity. A tiny workflow with a key (or a
//! function) no block knows is compiled, and the diagnostic's help, which lists what is
//! known, is read. So completion offers exactly what `rondo check` accepts, and a key
//! added to the compiler is offered without a change here.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::diagnostics::Code;
use crate::source::SourceFile;

const PROBE: &str = "zz_lsp_probe";

/// The kinds of block whose attributes are completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    Header,
    Limits,
    Llm,
    Tool,
    Builtin,
    Provider,
    Retry,
    Price,
    ToolDecl,
    Environment,
    Exit,
    Whiteboard,
    CodeContext,
    Conversation,
}

impl Block {
    const ALL: &[Block] = &[
        Block::Header,
        Block::Limits,
        Block::Llm,
        Block::Tool,
        Block::Builtin,
        Block::Provider,
        Block::Retry,
        Block::Price,
        Block::ToolDecl,
        Block::Environment,
        Block::Exit,
        Block::Whiteboard,
        Block::CodeContext,
        Block::Conversation,
    ];

    fn probe(self) -> String {
        let a = format!("{PROBE} = 1");
        match self {
            Block::Header => format!("workflow w {{\n  {a}\n}}\n"),
            Block::Limits => format!("workflow w {{\n  limits {{\n    {a}\n  }}\n}}\n"),
            Block::Llm => format!("role r: llm {{\n  {a}\n}}\n"),
            Block::Tool => format!("role r: tool {{\n  {a}\n}}\n"),
            Block::Builtin => format!("role r: builtin {{\n  {a}\n}}\n"),
            Block::Provider => format!("provider p {{\n  kind = \"openai\"\n  {a}\n}}\n"),
            Block::Retry => {
                format!("provider p {{\n  kind = \"openai\"\n  retry {{\n    {a}\n  }}\n}}\n")
            }
            Block::Price => {
                format!("provider p {{\n  kind = \"openai\"\n  price {{\n    {a}\n  }}\n}}\n")
            }
            Block::ToolDecl => format!("tool t {{\n  {a}\n}}\n"),
            Block::Environment => format!("environment e {{\n  kind = \"local\"\n  {a}\n}}\n"),
            Block::Exit => format!("exit e {{ {a} }}\n"),
            Block::Whiteboard => format!("memory {{\n  m: whiteboard {{\n    {a}\n  }}\n}}\n"),
            Block::CodeContext => {
                format!("memory {{\n  m: code_context {{\n    {a}\n  }}\n}}\n")
            }
            Block::Conversation => {
                format!("memory {{\n  m: conversation {{\n    {a}\n  }}\n}}\n")
            }
        }
    }
}

/// The attributes a kind of block takes, in the compiler's order.
pub fn attributes(block: Block) -> &'static [String] {
    static KEYS: OnceLock<HashMap<Block, Vec<String>>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        Block::ALL
            .iter()
            .map(|&b| (b, probe_attributes(&b.probe())))
            .collect()
    });
    keys.get(&block).map_or(&[], Vec::as_slice)
}

fn probe_attributes(text: &str) -> Vec<String> {
    let (_, diags) = crate::compile::load(&SourceFile::new("probe.rondo", text));
    let Some(d) = diags.iter().find(|d| {
        d.code == Code::AttrUnknown && d.labels.iter().any(|l| span_is_probe(text, l.span))
    }) else {
        return Vec::new();
    };
    let help = d.help.as_deref().unwrap_or("");
    match help.split_once("takes: ") {
        Some((_, list)) => list.split(", ").map(|k| k.trim().to_string()).collect(),
        None => Vec::new(),
    }
}

fn span_is_probe(text: &str, span: crate::source::Span) -> bool {
    text.get(span.start..span.end) == Some(PROBE)
}

/// The expression functions and how many arguments each takes.
pub fn functions() -> &'static [(String, usize)] {
    static FUNCTIONS: OnceLock<Vec<(String, usize)>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let text = format!("exit e when {PROBE}(1)\n");
        let (_, diags) = crate::compile::load(&SourceFile::new("probe.rondo", text.as_str()));
        let names: Vec<String> = diags
            .iter()
            .find(|d| d.code == Code::ExprUnknownFunction)
            .and_then(|d| d.help.as_deref())
            .and_then(|h| h.split_once("functions: "))
            .map(|(_, list)| list.split(", ").map(str::to_string).collect())
            .unwrap_or_default();
        names
            .into_iter()
            .map(|name| {
                let arity = arity(&name);
                (name, arity)
            })
            .collect()
    })
}

/// A call with too many arguments is refused with the count it takes.
fn arity(name: &str) -> usize {
    let args = ["1"; 9].join(", ");
    let text = format!("exit e when {name}({args})\n");
    let (_, diags) = crate::compile::load(&SourceFile::new("probe.rondo", text.as_str()));
    diags
        .iter()
        .find(|d| d.code == Code::ExprArity)
        .and_then(|d| {
            d.message
                .split("takes ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_kind_lists_its_attributes() {
        let has = |b: Block, key: &str| attributes(b).iter().any(|k| k == key);
        assert!(has(Block::Header, "prompts"));
        assert!(has(Block::Header, "limits"));
        assert!(has(Block::Limits, "max_steps"));
        assert!(has(Block::Llm, "prompt") && !has(Block::Llm, "command"));
        assert!(has(Block::Tool, "command") && !has(Block::Tool, "prompt"));
        assert!(has(Block::Builtin, "reads"));
        assert!(has(Block::Provider, "model"));
        assert!(has(Block::Retry, "max_attempts"));
        assert!(has(Block::Price, "input_per_1k"));
        assert!(has(Block::ToolDecl, "usage"));
        assert!(has(Block::Environment, "image"));
        assert!(has(Block::Exit, "code"));
        assert!(has(Block::Whiteboard, "sections"));
        assert!(has(Block::CodeContext, "alpha"));
        assert!(has(Block::Conversation, "max_messages"));
    }

    #[test]
    fn functions_come_with_their_arity() {
        let f: HashMap<&str, usize> = functions().iter().map(|(n, a)| (n.as_str(), *a)).collect();
        assert_eq!(f.get("len"), Some(&1));
        assert_eq!(f.get("if"), Some(&3));
        assert_eq!(f.get("now"), Some(&0));
        assert!(f.len() >= 17, "{f:?}");
    }
}
