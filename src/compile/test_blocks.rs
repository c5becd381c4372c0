//! `test` blocks: scripted replies and expectations, checked like the rest of the file.

use std::collections::HashMap;

use petgraph::graph::NodeIndex;

use super::Compiler;
use super::attrs::Attrs;
use super::expr::Scope;
use super::workflow::{RoleKind, TestCase, TestExpectation};
use crate::diagnostics::{Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast};

impl Compiler<'_> {
    pub(super) fn tests(&mut self, ast: &Ast) {
        let mut names: HashMap<&str, Span> = HashMap::new();
        for test in &ast.tests {
            if let Some(first) = names.insert(&test.name, test.span) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::test::duplicate",
                        format!("two tests are named {:?}", test.name),
                    )
                    .label(test.span, "second test")
                    .label(first, "first test")
                    .help("give each test its own name"),
                );
            }
            Attrs::new(&test.attrs, &[], format!("test {:?}", test.name)).finish(&mut self.diags);
            let mut case = TestCase {
                name: test.name.clone(),
                inputs: Vec::new(),
                replies: Vec::new(),
                expectations: Vec::new(),
                span: test.span,
            };
            for (name, value) in &test.inputs {
                let Some(&id) = self.input_names.get(&name.name) else {
                    let candidates: Vec<&str> =
                        self.input_names.keys().map(String::as_str).collect();
                    let help = did_you_mean(&name.name, candidates).unwrap_or_else(|| {
                        "declare it in the workflow header: `input NAME: type`".into()
                    });
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::test::unknown_input",
                            format!("unknown input `{}`", name.name),
                        )
                        .label(name.span, "not an input of the workflow")
                        .help(help),
                    );
                    continue;
                };
                if let Some(v) = self.const_value(value) {
                    case.inputs.push((id, v));
                }
            }
            for reply in &test.replies {
                let Some(node) = self.node_ref(&reply.role) else {
                    continue;
                };
                if !matches!(
                    self.workflow.role(node).map(|r| &r.kind),
                    Some(RoleKind::Llm(_))
                ) {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::test::reply_not_llm",
                            format!(
                                "`{}` is not an llm role; only llm roles get scripted replies",
                                reply.role.name
                            ),
                        )
                        .label(reply.role.span, "not an llm role")
                        .help("tool roles run for real in tests; builtin roles need no reply"),
                    );
                    continue;
                }
                case.replies.push((node, reply.visit, reply.text.clone()));
            }
            for expectation in &test.expectations {
                let e = match expectation {
                    syntax::Expectation::Exit(name) => match self.node_ref(name) {
                        Some(node) if self.workflow.is_exit(node) => TestExpectation::Exit {
                            node,
                            span: name.span,
                        },
                        Some(_) => {
                            self.diags.push(
                                Diagnostic::error(
                                    "rondo::test::not_an_exit",
                                    format!("`{}` is a role, not an exit", name.name),
                                )
                                .label(name.span, "not an exit")
                                .help("`expect exit NAME` names an exit such as `success`"),
                            );
                            continue;
                        }
                        None => continue,
                    },
                    syntax::Expectation::Path(names, span) => {
                        let nodes: Option<Vec<NodeIndex>> =
                            names.iter().map(|n| self.node_ref(n)).collect();
                        match nodes {
                            Some(nodes) => TestExpectation::Path { nodes, span: *span },
                            None => continue,
                        }
                    }
                    syntax::Expectation::Artifact {
                        name,
                        contains,
                        span,
                    } => TestExpectation::Artifact {
                        name: name.clone(),
                        contains: contains.clone(),
                        span: *span,
                    },
                    syntax::Expectation::Holds(expr) => {
                        let scope = Scope::global();
                        let (expr, ty) = self.expr(expr, &scope);
                        self.expect_bool(&expr, &ty, "an expectation");
                        TestExpectation::Holds { expr }
                    }
                };
                case.expectations.push(e);
            }
            self.workflow.tests.push(case);
        }
    }
}
