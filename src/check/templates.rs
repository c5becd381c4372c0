//! Prompt templates: each exists, parses, and reads only what its role will have.

use std::collections::BTreeSet;

use super::node_name;
use crate::compile::{RoleKind, Workflow};
use crate::diagnostics::{Diagnostic, Diagnostics, did_you_mean};
use crate::prompt::Prompts;

/// Variables every prompt has besides the role names.
pub const PROMPT_ROOTS: &[&str] = &[
    "input",
    "memory",
    "tools",
    "round",
    "step",
    "visit",
    "item",
    "last_error",
    "run_id",
];

pub fn check(workflow: &Workflow, diags: &mut Diagnostics) {
    let has_llm = workflow
        .roles()
        .any(|(_, r)| matches!(r.kind, RoleKind::Llm(_)));
    if !has_llm {
        return;
    }
    let prompts = Prompts::for_workflow(workflow);
    let role_names: BTreeSet<&str> = workflow
        .roles()
        .map(|(i, _)| node_name(workflow, i))
        .collect();
    let memory_names: Vec<&str> = workflow.memory.iter().map(|m| m.name.as_str()).collect();
    let input_names: Vec<&str> = workflow.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut reported_parse = BTreeSet::new();
    for (index, role) in workflow.roles() {
        let RoleKind::Llm(llm) = &role.kind else {
            continue;
        };
        let name = node_name(workflow, index);
        let span = workflow.node(index).span;
        for template in llm.system.iter().chain(std::iter::once(&llm.prompt)) {
            let file = template.to_string_lossy().replace('\\', "/");
            if file.is_empty() {
                continue;
            }
            if let Some(error) = prompts.errors.get(&file) {
                if reported_parse.insert(file.clone()) {
                    diags.push(
                        Diagnostic::error(
                            "rondo::template::parse",
                            format!("template `{file}` does not parse"),
                        )
                        .label(span, error.clone())
                        .help(format!(
                            "fix {}",
                            workflow.prompts_dir.join(&file).display()
                        )),
                    );
                }
                continue;
            }
            if !prompts.has(&file) {
                let names = prompts.names();
                let help = did_you_mean(&file, names.iter().map(String::as_str))
                    .unwrap_or_else(|| format!("create it in {}", workflow.prompts_dir.display()));
                diags.push(
                    Diagnostic::error(
                        "rondo::template::missing",
                        format!("role `{name}` uses template `{file}`, which does not exist"),
                    )
                    .label(
                        span,
                        format!("no file {}", workflow.prompts_dir.join(&file).display()),
                    )
                    .help(help),
                );
                continue;
            }
            for (root, second) in prompts.variables(&file) {
                if root == "memory" {
                    let Some(slot) = second else { continue };
                    match workflow.memory.iter().position(|m| m.name == slot) {
                        None => diags.push(
                            Diagnostic::error("rondo::template::unknown_memory", format!("template `{file}` reads `memory.{slot}`, which is not declared"))
                                .label(span, format!("used by role `{name}`"))
                                .help(did_you_mean(&slot, memory_names.iter().copied()).unwrap_or_else(|| "declare it in `memory { ... }`".into())),
                        ),
                        Some(id) if !role.reads.contains(&id) => diags.push(
                            Diagnostic::error("rondo::template::memory_not_read", format!("template `{file}` reads `memory.{slot}`, but role `{name}` does not declare it"))
                                .label(span, "missing from `reads`")
                                .help(format!("add it: `reads = [{slot}]`")),
                        ),
                        Some(_) => {}
                    }
                } else if root == "input" {
                    if let Some(input) = second
                        && !input_names.contains(&input.as_str())
                    {
                        diags.push(
                            Diagnostic::error(
                                "rondo::template::unknown_input",
                                format!(
                                    "template `{file}` reads `input.{input}`, which is not an input"
                                ),
                            )
                            .label(span, format!("used by role `{name}`"))
                            .help(
                                did_you_mean(&input, input_names.iter().copied())
                                    .unwrap_or_else(|| "declare it: `input NAME: type`".into()),
                            ),
                        );
                    }
                } else if !PROMPT_ROOTS.contains(&root.as_str())
                    && !role_names.contains(root.as_str())
                {
                    let candidates: Vec<&str> = PROMPT_ROOTS
                        .iter()
                        .copied()
                        .chain(role_names.iter().copied())
                        .collect();
                    diags.push(
                        Diagnostic::error(
                            "rondo::template::unknown_variable",
                            format!(
                                "template `{file}` uses `{root}`, which role `{name}` will not have"
                            ),
                        )
                        .label(span, format!("renders {file}"))
                        .help(
                            did_you_mean(&root, candidates).unwrap_or_else(|| {
                                format!(
                                    "templates see: {}, and each role's latest output by role name",
                                    PROMPT_ROOTS.join(", ")
                                )
                            }),
                        ),
                    );
                }
            }
        }
    }
}
