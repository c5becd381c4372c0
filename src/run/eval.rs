//! Evaluates compiled expressions against the run state.

use std::cmp::Ordering;
use std::path::Path;

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::code_agent;
use super::memory::MemoryValue;
use super::state::RunState;
use super::value::{equal, truthy};
use crate::compile::{Expr, ExprKind, Func, Root, Unchecked, Workflow, number_value};
use crate::syntax::BinOp;

/// What an expression can see besides the state.
pub struct Env<'a> {
    pub workflow: &'a Workflow,
    pub state: &'a RunState,
    /// The run's workspace: `exists()` and code-context views read here, confined.
    pub workspace: &'a Path,
    pub role: Option<NodeIndex>,
    pub output: Option<&'a Value>,
    pub item: Option<&'a Value>,
    pub prompt: Option<&'a Value>,
}

static NULL: Value = Value::Null;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone)]
pub struct EvalError {
    pub message: String,
    /// The operation that failed was accepted by `check` on a value typed `any`: the
    /// value's kind is the fault of what produced it (a reply, a tool's data), not of the
    /// engine.
    pub unchecked: bool,
}

impl EvalError {
    fn new(message: String, unchecked: &Unchecked) -> Self {
        EvalError {
            message,
            unchecked: !unchecked.is_no(),
        }
    }
}

impl EvalError {
    /// The step's error: a value of the wrong kind ends the run at `invalid_output`, any
    /// other failure at `error`.
    pub(super) fn step(self, context: impl std::fmt::Display) -> super::StepError {
        if self.unchecked {
            super::StepError::Invalid(format!(
                "{context}: {} (the value was typed `any`, so `check` could not prove its kind)",
                self.message
            ))
        } else {
            super::StepError::Failed(format!("{context}: {}", self.message))
        }
    }
}

impl crate::prompt::RenderError {
    /// The step's error: a template that failed on a value `check` could not prove (typed
    /// `any`) ends the run at `invalid_output`, as an expression does; a rendering past its
    /// bound, `throw` or an unset `get_env` at `error`.
    pub(super) fn step(self, context: impl std::fmt::Display) -> super::StepError {
        if self.wrong_kind {
            super::StepError::Invalid(format!(
                "{context}: {} (a value typed `any`, from a reply or a tool's data, is not of the kind the template needs)",
                self.message
            ))
        } else {
            super::StepError::Failed(format!("{context}: {}", self.message))
        }
    }
}

impl From<String> for EvalError {
    fn from(message: String) -> Self {
        EvalError {
            message,
            unchecked: false,
        }
    }
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Env<'_> {
    pub fn eval(&self, e: &Expr) -> Result<Value, String> {
        self.value(e).map_err(|e| e.message)
    }

    /// [`Self::eval`], telling a value of the wrong kind apart from a fault.
    pub fn value(&self, e: &Expr) -> Result<Value, EvalError> {
        Ok(match &e.kind {
            ExprKind::Literal { value } => value.clone(),
            ExprKind::Matches { text, pattern } => Value::Bool(
                self.value(text)?
                    .as_str()
                    .is_some_and(|t| pattern.is_match(t)),
            ),
            ExprKind::Visits { node } => {
                Value::from(self.state.visits.get(node.index()).copied().unwrap_or(0))
            }
            ExprKind::Used { tool } => Value::Bool(self.state.tools_used.contains(tool)),
            ExprKind::List { items } => Value::Array(
                items
                    .iter()
                    .map(|i| self.value(i))
                    .collect::<Result<_, _>>()?,
            ),
            ExprKind::Map { entries } => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.value(v)?)))
                    .collect::<Result<_, EvalError>>()?,
            ),
            ExprKind::Path { root, fields } => self.path(*root, fields)?,
            ExprKind::Get { base, fields } => {
                let mut v = self.value(base)?;
                for f in fields {
                    v = v.get(f).cloned().unwrap_or(Value::Null);
                }
                v
            }
            ExprKind::Not { operand } => Value::Bool(!truthy(&self.value(operand)?)),
            ExprKind::Neg { operand, unchecked } => match self.value(operand)?.as_f64() {
                Some(n) => number_value(-n),
                None => {
                    return Err(EvalError::new(
                        format!("`{}` is not a number", operand.text),
                        unchecked,
                    ));
                }
            },
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                unchecked,
            } => self.binary(*op, lhs, rhs, unchecked)?,
            ExprKind::Call {
                func,
                args,
                unchecked,
            } => self.call(*func, args, unchecked)?,
        })
    }

    /// A path from `root` through `fields`.
    fn path(&self, root: Root, fields: &[String]) -> Result<Value, String> {
        Ok(match root {
            Root::Memory { id }
                if self
                    .state
                    .memory
                    .get(id)
                    .is_some_and(|m| m.plain().is_none()) =>
            {
                let view = self.state.memory[id].view(&self.workflow.memory[id], self.workspace);
                let mut v = &view;
                for f in fields {
                    v = v.get(f).unwrap_or(&NULL);
                }
                v.clone()
            }
            Root::Role { node }
                if fields
                    .first()
                    .is_some_and(|f| f == "invalid" || f == "invalid_reply")
                    && self.workflow.is_json_llm(node) =>
            {
                let output = self.state.outputs.get(&node.index()).unwrap_or(&NULL);
                let invalid = is_invalid_record(output);
                let mut v = if fields[0] == "invalid" {
                    Value::Bool(invalid)
                } else if invalid {
                    invalid_reply(output)
                } else {
                    Value::Null
                };
                for f in &fields[1..] {
                    v = v.get(f).cloned().unwrap_or(Value::Null);
                }
                v
            }
            Root::Ended => {
                let mut v = serde_json::to_value(&self.state.ended).unwrap_or(Value::Null);
                for f in fields {
                    v = v.get(f).cloned().unwrap_or(Value::Null);
                }
                v
            }
            Root::Round | Root::Step | Root::Visit | Root::RunId => self.builtin(root),
            _ => {
                let mut v = self.root(root)?;
                for f in fields {
                    v = v.get(f).unwrap_or(&NULL);
                }
                v.clone()
            }
        })
    }

    pub fn condition(&self, e: &Expr) -> Result<bool, String> {
        self.eval(e).map(|v| truthy(&v))
    }

    /// [`Self::condition`], telling a value of the wrong kind apart from a fault.
    pub fn holds(&self, e: &Expr) -> Result<bool, EvalError> {
        self.value(e).map(|v| truthy(&v))
    }

    fn root(&self, root: Root) -> Result<&Value, String> {
        Ok(match root {
            Root::Input { id } => self.state.inputs.get(id).unwrap_or(&NULL),
            Root::Memory { id } => self
                .state
                .memory
                .get(id)
                .and_then(MemoryValue::plain)
                .unwrap_or(&NULL),
            Root::Role { node } => self.state.outputs.get(&node.index()).unwrap_or(&NULL),
            Root::Output => self.output.unwrap_or(&NULL),
            Root::Prompt => self.prompt.unwrap_or(&NULL),
            Root::Item => self.item.unwrap_or(&NULL),
            Root::Round | Root::Step | Root::Visit | Root::RunId | Root::Ended => &NULL,
        })
    }

    fn builtin(&self, root: Root) -> Value {
        match root {
            Root::Round => Value::from(self.state.round(self.workflow)),
            Root::Step => Value::from(self.state.step),
            Root::Visit => Value::from(self.role.map_or(0, |r| self.state.visits[r.index()])),
            _ => Value::String(self.state.run_id.clone()),
        }
    }

    fn binary(
        &self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        unchecked: &Unchecked,
    ) -> Result<Value, EvalError> {
        // `and`/`or` short-circuit so `x != null and x.y == 1` is safe.
        match op {
            BinOp::And => return Ok(Value::Bool(self.holds(lhs)? && self.holds(rhs)?)),
            BinOp::Or => return Ok(Value::Bool(self.holds(lhs)? || self.holds(rhs)?)),
            BinOp::Coalesce => {
                return match self.value(lhs)? {
                    Value::Null => self.value(rhs),
                    value => Ok(value),
                };
            }
            _ => {}
        }
        let fail = |message: String| Err(EvalError::new(message, unchecked));
        let (l, r) = (self.value(lhs)?, self.value(rhs)?);
        Ok(match op {
            BinOp::Eq => Value::Bool(equal(&l, &r)),
            BinOp::Ne => Value::Bool(!equal(&l, &r)),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                // What cannot be ordered (null, or values of other kinds behind `any`) is
                // neither less nor greater: the comparison is false, never a failed run.
                let Some(ord) = compare(&l, &r) else {
                    return Ok(Value::Bool(false));
                };
                Value::Bool(match op {
                    BinOp::Lt => ord == Ordering::Less,
                    BinOp::Le => ord != Ordering::Greater,
                    BinOp::Gt => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                })
            }
            BinOp::Add => match (&l, &r) {
                // Absent adds nothing: `[cmd] + params.args` when there are no args.
                (Value::Array(_) | Value::String(_), Value::Null) => l.clone(),
                (Value::Null, Value::Array(_) | Value::String(_)) => r.clone(),
                (Value::String(a), Value::String(b)) => Value::String(format!("{a}{b}")),
                (Value::Array(a), Value::Array(b)) => {
                    Value::Array(a.iter().chain(b).cloned().collect())
                }
                _ => match (l.as_f64(), r.as_f64()) {
                    (Some(a), Some(b)) => number_value(a + b),
                    _ => return fail(format!("cannot add {} and {}", short(&l), short(&r))),
                },
            },
            _ => match (l.as_f64(), r.as_f64()) {
                (Some(a), Some(b)) => number_value(a - b),
                _ => return fail(format!("cannot subtract {} from {}", short(&r), short(&l))),
            },
        })
    }

    /// Long but one piece: one short arm per built-in function, the table of what they do.
    fn call(&self, func: Func, args: &[Expr], unchecked: &Unchecked) -> Result<Value, EvalError> {
        let arg = |i: usize| {
            args.get(i)
                .map(|a| self.value(a))
                .unwrap_or(Ok(Value::Null))
        };
        Ok(match func {
            Func::Len => Value::from(match arg(0)? {
                Value::Array(a) => a.len(),
                Value::Object(o) => o.len(),
                Value::String(s) => s.chars().count(),
                Value::Null => 0,
                other => {
                    return Err(EvalError::new(
                        format!(
                            "`len` of {}, which is not a list, a map or a string",
                            short(&other)
                        ),
                        unchecked,
                    ));
                }
            }),
            Func::Contains => {
                let (hay, needle) = (arg(0)?, arg(1)?);
                Value::Bool(match &hay {
                    Value::Array(a) => a.iter().any(|x| equal(x, &needle)),
                    Value::Object(o) => needle.as_str().is_some_and(|k| o.contains_key(k)),
                    Value::String(s) => needle.as_str().is_some_and(|n| s.contains(n)),
                    _ => false,
                })
            }
            // Compiled to `ExprKind::Matches`, `Visits` and `Used` (a literal pattern, a
            // name), never to a call.
            Func::Matches | Func::Visits | Func::Used => {
                return Err(EvalError::new(
                    "`matches` takes a pattern written as a string, `visits` and `used` a name"
                        .to_string(),
                    unchecked,
                ));
            }
            Func::Exists => {
                let name = arg(0)?;
                let rel = name.as_str().unwrap_or("");
                // Only inside the workspace: never an absolute path, `..`, a symbolic link
                // out of it or the system area.
                Value::Bool(
                    rondo_workspace::Workspace::open(self.workspace).is_ok_and(|w| w.exists(rel)),
                )
            }
            Func::First => match arg(0)? {
                Value::Array(mut a) if !a.is_empty() => a.swap_remove(0),
                _ => Value::Null,
            },
            Func::Last => match arg(0)? {
                Value::Array(mut a) => a.pop().unwrap_or(Value::Null),
                _ => Value::Null,
            },
            Func::At => {
                let list = arg(0)?;
                let index = arg(1)?.as_f64().unwrap_or(-1.0);
                match list {
                    Value::Array(a) if index >= 0.0 => {
                        a.get(index as usize).cloned().unwrap_or(Value::Null)
                    }
                    _ => Value::Null,
                }
            }
            Func::Json => Value::String(serde_json::to_string(&arg(0)?).unwrap_or_default()),
            Func::Lower => Value::String(arg(0)?.as_str().unwrap_or("").to_lowercase()),
            Func::Now => Value::String(super::clock::now_rfc3339()),
            // A missing value proves nothing: `all(null)` is false, `all([])` true.
            Func::All => Value::Bool(match arg(0)? {
                Value::Array(a) => a.iter().all(|v| v == &Value::Bool(true)),
                Value::Object(o) => o.values().all(|v| v == &Value::Bool(true)),
                _ => false,
            }),
            Func::Without => {
                let (items, other) = (arg(0)?, arg(1)?);
                let present = |x: &Value| match &other {
                    Value::Array(a) => a.iter().any(|y| equal(x, y)),
                    Value::Object(o) => x.as_str().is_some_and(|k| o.contains_key(k)),
                    _ => false,
                };
                match items {
                    Value::Array(a) => {
                        Value::Array(a.into_iter().filter(|x| !present(x)).collect())
                    }
                    _ => Value::Array(Vec::new()),
                }
            }
            // Workflow-specific: kept in their own library.
            Func::ShellReads => code_agent::shell_reads(&arg(0)?, &arg(1)?, &arg(2)?),
            Func::RepoPath => {
                let dir = arg(1)?;
                code_agent::repo_path(&arg(0)?, &dir)
            }
            // Only the branch taken is evaluated.
            Func::If => {
                if arg(0)?.as_bool().unwrap_or(false) {
                    arg(1)?
                } else {
                    arg(2)?
                }
            }
        })
    }
}

/// The stored output of a reply that stayed invalid: `{"invalid": true, raw, error, attempts}`.
pub fn is_invalid_record(output: &Value) -> bool {
    output.get("invalid") == Some(&Value::Bool(true))
}

/// `X.invalid_reply` of an invalid record.
pub fn invalid_reply(output: &Value) -> Value {
    let field = |k: &str| output.get(k).cloned().unwrap_or(Value::Null);
    serde_json::json!({"raw": field("raw"), "error": field("error"), "attempts": field("attempts")})
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}…", &s[..s.floor_char_boundary(40)])
    } else {
        s
    }
}
