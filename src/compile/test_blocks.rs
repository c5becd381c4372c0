//! `test` blocks: scripted replies and expectations, checked like the rest of the file.

use std::collections::HashMap;

use petgraph::graph::NodeIndex;

use super::Compiler;
use super::attrs::Attrs;
use super::expr::Scope;
use super::workflow::{RoleKind, TestCase, TestExpectation};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast, Ident};

impl Compiler<'_> {
    pub(super) fn tests(&mut self, ast: &Ast) {
        let mut names: HashMap<&str, Span> = HashMap::new();
        for test in &ast.tests {
            if let Some(first) = names.insert(&test.name, test.span) {
                self.diags.push(
                    Diagnostic::error(
                        Code::TestDuplicate,
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
            self.test_inputs(test, &mut case);
            self.test_replies(test, &mut case);
            for expectation in &test.expectations {
                if let Some(e) = self.test_expectation(expectation) {
                    case.expectations.push(e);
                }
            }
            self.workflow.tests.push(case);
        }
    }

    /// A test's inputs, each a constant of its input's type.
    fn test_inputs(&mut self, test: &syntax::TestDecl, case: &mut TestCase) {
        for (name, value) in &test.inputs {
            let Some(&id) = self.input_names.get(&name.name) else {
                let candidates: Vec<&str> = self.input_names.keys().map(String::as_str).collect();
                let help = did_you_mean(&name.name, candidates).unwrap_or_else(|| {
                    "declare it in the workflow header: `input NAME: type`".into()
                });
                self.diags.push(
                    Diagnostic::error(
                        Code::TestUnknownInput,
                        format!("unknown input `{}`", name.name),
                    )
                    .label(name.span, "not an input of the workflow")
                    .help(help),
                );
                continue;
            };
            if let Some(v) = self.const_value(value) {
                let input = &self.workflow.inputs[id];
                if let Err(e) = input.ty.validate(&v) {
                    self.diags.push(
                        Diagnostic::error(
                            Code::TestBadInput,
                            format!("the value of input `{}` does not fit its type", name.name),
                        )
                        .label(value.span, e)
                        .help(format!("the input is declared as `{}`", input.ty.display())),
                    );
                    continue;
                }
                case.inputs.push((id, v));
            }
        }
    }

    /// A test's scripted replies, each to an llm role.
    fn test_replies(&mut self, test: &syntax::TestDecl, case: &mut TestCase) {
        for reply in &test.replies {
            let Some(node) = self.test_name(&reply.role, Named::Reply) else {
                continue;
            };
            if !matches!(
                self.workflow.role(node).map(|r| &r.kind),
                Some(RoleKind::Llm(_))
            ) && !self.twice_declared.contains(&reply.role.name)
            {
                self.diags.push(
                    Diagnostic::error(
                        Code::TestReplyNotLlm,
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
    }

    /// One `expect ...` of a test; none when what it names is not there.
    fn test_expectation(&mut self, expectation: &syntax::Expectation) -> Option<TestExpectation> {
        Some(match expectation {
            syntax::Expectation::Exit(name) => match self.test_name(name, Named::Exit) {
                Some(node) if self.workflow.is_exit(node) => TestExpectation::Exit {
                    node,
                    span: name.span,
                },
                Some(_) => {
                    self.diags.push(
                        Diagnostic::error(
                            Code::TestNotAnExit,
                            format!("`{}` is a role, not an exit", name.name),
                        )
                        .label(name.span, "not an exit")
                        .help("`expect exit NAME` names an exit such as `success`"),
                    );
                    return None;
                }
                None => return None,
            },
            syntax::Expectation::Path(names, span) => {
                let nodes: Option<Vec<NodeIndex>> = names
                    .iter()
                    .map(|n| self.test_name(n, Named::Path))
                    .collect();
                match nodes {
                    Some(nodes) => TestExpectation::Path { nodes, span: *span },
                    None => return None,
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
        })
    }

    /// The role or exit a test names. An undeclared one is the test's mistake
    /// (`rondo::test::unknown_name`), unless the routes use the name too: then it is
    /// one fault, and their error labels this use as well.
    fn test_name(&mut self, name: &Ident, named: Named) -> Option<NodeIndex> {
        if self.node_names.contains_key(&name.name) || self.refused_nodes.contains(&name.name) {
            return self.node_ref(name);
        }
        let in_routes = format!("`{}` is not a declared role or exit", name.name);
        if self
            .diags
            .iter()
            .any(|d| d.code == Code::RouteUnknownTarget && d.message == in_routes)
        {
            return self.node_ref(name);
        }
        let candidates: Vec<&str> = self
            .node_names
            .iter()
            .filter(|&(_, &n)| match named {
                Named::Reply => matches!(
                    self.workflow.role(n).map(|r| &r.kind),
                    Some(RoleKind::Llm(_))
                ),
                Named::Exit => self.workflow.is_exit(n),
                Named::Path => n != self.workflow.start,
            })
            .map(|(n, _)| n.as_str())
            .collect();
        let (label, declare) = match named {
            Named::Reply => ("no llm role of this name", "the llm roles"),
            Named::Exit => ("no exit of this name", "the exits"),
            Named::Path => ("no role or exit of this name", "the roles and exits"),
        };
        let help = did_you_mean(&name.name, candidates.iter().copied()).unwrap_or_else(|| {
            let mut names = candidates;
            names.sort_unstable();
            format!(
                "a test names {declare} of the workflow: {}",
                names.join(", ")
            )
        });
        self.diags.push(
            Diagnostic::error(
                Code::TestUnknownName,
                format!("the test names `{}`, which is not declared", name.name),
            )
            .label(name.span, label)
            .help(help),
        );
        None
    }
}

/// What a name in a test stands for.
#[derive(Clone, Copy)]
enum Named {
    /// `reply NAME = ...`: an llm role.
    Reply,
    /// `expect exit NAME`.
    Exit,
    /// `expect path [..]`: a role or an exit.
    Path,
}
