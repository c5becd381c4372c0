//! The run loop: one step at a time (execute, apply, exit guards, route, checkpoint), forks
//! of parallel and map routes, limits, and the finish.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::clock;
use super::eval::{self, Env};
use super::events::Event;
use super::rundir::RunStatus;
use super::state::{self, Position, RunState, Status};
use super::tools;
use super::{Flow, Interpreter, Outcome, RoleRun, StepError};
use crate::compile::{Condition, NodeKind, RoleKind, RouteTarget};

impl<'w> Interpreter<'w> {
    /// Runs until an exit, a limit, an error or an interrupt.
    pub async fn drive(mut self, mut state: RunState) -> Outcome {
        if self.resumed {
            let removed = self.envs.remove_orphans().await;
            if !removed.is_empty() {
                self.event(Event::StaleContainersRemoved {
                    containers: removed,
                });
            }
        }
        let (exit, reason) = loop {
            if self.interrupted.load(Ordering::SeqCst) {
                break self.stop_interrupted(&mut state).await;
            }
            let position = state.position.clone();
            let flow = match position {
                Position::Exited { node, reason } => break (node, reason),
                Position::Node { node } if node == self.workflow.start => {
                    self.route(&mut state, node)
                }
                Position::Node { node } if self.workflow.is_exit(node) => Ok(Flow::Exit {
                    node,
                    reason: "reached".into(),
                }),
                Position::Node { node } => self.step(&mut state, node).await,
                Position::Fork { route, done } => self.fork(&mut state, route, done).await,
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Exit { node, reason }) => {
                    state.position = Position::Exited { node, reason };
                }
                Err(StepError::Interrupted) => break self.stop_interrupted(&mut state).await,
                Err(StepError::Limit(reason)) => {
                    let node = self.builtin_exit("limit");
                    state.position = Position::Exited { node, reason };
                }
                Err(StepError::Invalid(reason)) => {
                    let node = self.builtin_exit("invalid_output");
                    state.position = Position::Exited { node, reason };
                }
                Err(StepError::Failed(reason)) => break (self.builtin_exit("error"), reason),
            }
        };
        self.finish(state, exit, reason).await
    }

    async fn stop_interrupted(&mut self, state: &mut RunState) -> (NodeIndex, String) {
        state.status = Status::Interrupted;
        match self.checkpoint(state).await {
            Ok(()) => (
                self.builtin_exit("interrupted"),
                "interrupted; `rondo resume` continues the run".into(),
            ),
            Err(e) => {
                state.status = Status::Running;
                (self.builtin_exit("error"), e.message().to_string())
            }
        }
    }

    fn builtin_exit(&self, name: &str) -> NodeIndex {
        self.workflow.find_node(name).unwrap_or(self.workflow.start)
    }

    pub(super) async fn finish(
        mut self,
        mut state: RunState,
        exit: NodeIndex,
        reason: String,
    ) -> Outcome {
        let mut end = Ending {
            reason: self.redactor.redact(&reason).into_owned(),
            name: self.workflow.node(exit).name.clone(),
            code: self.exit_code(exit),
        };
        let already_finished = state.status == Status::Finished;
        if state.status != Status::Interrupted {
            // An error exit keeps the position of the failed step, so `resume` retries it.
            if end.name == "error" {
                state.status = Status::Failed;
            } else {
                state.status = Status::Finished;
                state.position = Position::Exited {
                    node: exit,
                    reason: end.reason.clone(),
                };
            }
        }
        if !already_finished {
            end = self.record_end(&mut state, end).await;
        }
        self.envs.shutdown().await;
        self.write_final_info(&state, &end).await;
        if let Some(dir) = &mut self.dir {
            let _ = dir.flush();
        }
        self.reporter.finish(&end.name, &end.reason, &state);
        Outcome {
            workspace: self.workspace.root().to_path_buf(),
            run_dir: self.run_dir,
            exit: end.name,
            exit_code: end.code,
            reason: end.reason,
            state,
        }
    }

    /// The run's last step: the `finally` role and the workflow-level artifacts, the
    /// `exit` event and the final checkpoint. When that checkpoint cannot be written the
    /// run ends at `error`, which says why, and `rondo resume` finishes it from the last
    /// checkpoint.
    async fn record_end(&mut self, state: &mut RunState, end: Ending) -> Ending {
        self.flush_buffered_events();
        self.settle(state);
        state.ended = Some(end.recorded());
        self.at_end(state, &end.name);
        self.exit_event(state, &end);
        let Err(e) = self.checkpoint(state).await else {
            return end;
        };
        let error = self.builtin_exit("error");
        let reason = if end.name == "error" && end.reason != e.message() {
            format!("{}; then {}", end.reason, e.message())
        } else {
            e.message().to_string()
        };
        let failed = Ending {
            name: self.workflow.node(error).name.clone(),
            code: self.exit_code(error),
            reason,
        };
        state.status = Status::Failed;
        state.ended = Some(failed.recorded());
        self.exit_event(state, &failed);
        let _ = self.checkpoint(state).await;
        failed
    }

    fn exit_event(&mut self, state: &RunState, end: &Ending) {
        self.event(Event::Exit {
            exit: end.name.clone(),
            code: end.code,
            reason: end.reason.clone(),
            step: state.step,
            totals: state.totals.clone(),
        });
    }

    /// `run.json` says how the run ended.
    async fn write_final_info(&mut self, state: &RunState, end: &Ending) {
        let Some(mut info) = self.info.take() else {
            return;
        };
        info.ended_at = Some(clock::now_rfc3339());
        info.status = match state.status {
            Status::Interrupted => RunStatus::Interrupted,
            Status::Failed => RunStatus::Failed,
            _ => RunStatus::Finished,
        };
        info.exit = Some(end.name.clone());
        info.exit_code = Some(end.code);
        info.reason = Some(end.reason.clone());
        info.totals = state.totals.clone();
        let written = match &self.dir {
            Some(dir) => match dir.info_job(&info) {
                Ok(job) => job.commit().await,
                Err(e) => Err(e),
            },
            None => Ok(()),
        };
        if let Err(e) = written {
            self.reporter.warn(&format!("cannot write run.json: {e}"));
        }
    }

    fn exit_code(&self, exit: NodeIndex) -> i32 {
        match &self.workflow.node(exit).kind {
            NodeKind::Exit(spec) => spec.code,
            _ => 2,
        }
    }

    /// The end of a run, whatever ended it: the `finally` role (not on an interrupt, after
    /// which `rondo resume` goes on), then the workflow-level artifacts once more, so they
    /// see `ended`. A failure here is recorded; the run keeps the exit it reached.
    fn at_end(&mut self, state: &mut RunState, exit: &str) {
        let finally = self.workflow.finally.filter(|_| exit != "interrupted");
        // `apply` writes the workflow-level artifacts after the role.
        let applied = match finally {
            Some(node) => self
                .apply(state, node, RoleRun::plain(Value::Null), None)
                .map(|()| true),
            None => Ok(false),
        };
        if let Err(e) = &applied {
            self.end_failed(exit, e);
        }
        // The end is not a step: append-mode artifacts (one line per step) get no line.
        let state_files: Vec<crate::compile::Artifact> = match applied {
            Ok(true) => Vec::new(),
            _ => self
                .workflow
                .artifacts
                .iter()
                .filter(|a| !a.append)
                .cloned()
                .collect(),
        };
        let written = self.write_artifacts(&state_files, state, None, None, None, None, 0);
        match written {
            Ok(appended) => state.file_lengths.extend(appended),
            Err(e) => self.end_failed(exit, &e),
        }
    }

    fn end_failed(&mut self, exit: &str, e: &StepError) {
        self.event(Event::EndFailed {
            exit: exit.to_string(),
            error: e.message().to_string(),
        });
    }

    fn check_limits(&self, state: &RunState) -> Result<(), StepError> {
        let limits = &self.workflow.limits;
        if let Some(max) = limits.max_steps
            && state.step >= max
        {
            return Err(StepError::Limit(format!(
                "the run reached max_steps = {max}"
            )));
        }
        if let Some(max) = limits.max_wall_time_ms
            && self.elapsed_ms(state) >= max
        {
            return Err(StepError::Limit(format!(
                "the run reached max_wall_time ({max} ms)"
            )));
        }
        Ok(())
    }

    /// One role: execute, apply, check exits, route, checkpoint.
    pub(super) async fn step(
        &mut self,
        state: &mut RunState,
        node: NodeIndex,
    ) -> Result<Flow, StepError> {
        self.check_limits(state)?;
        let role = self
            .workflow
            .role(node)
            .ok_or_else(|| StepError::Failed("not a role".into()))?;
        if let Some(max) = role.max_visits.map(|m| m.in_run(&state.inputs))
            && state.visits[node.index()] >= max
        {
            return Err(StepError::Limit(format!(
                "role `{}` reached max_visits = {max}",
                self.workflow.node(node).name
            )));
        }
        let visit = state.visits[node.index()] + 1;
        let run = self.execute(state, node, visit, None, None).await?;
        self.apply(state, node, run, None)?;
        // A step that ends the run is synced with the end's checkpoint, which follows at
        // once (nothing between them acts outside the run's files).
        let flow = match self.exit_guards(state)? {
            Some(flow) => flow,
            None => self.route(state, node)?,
        };
        mark_exit(state, &flow);
        if self.checkpoints_anything() {
            self.checkpoint_then(state, !matches!(flow, Flow::Exit { .. }))
                .await?;
        }
        Ok(flow)
    }

    pub(super) fn exit_guards(&mut self, state: &RunState) -> Result<Option<Flow>, StepError> {
        for (exit, expr) in &self.workflow.exit_guards {
            let env = self.env(state, None, None, None);
            let holds = env.holds(expr).map_err(|e| {
                e.step(format_args!(
                    "the condition of exit `{}`",
                    self.workflow.node(*exit).name
                ))
            })?;
            if holds {
                let reason = format!("`{}` holds", expr.text);
                return Ok(Some(Flow::Exit {
                    node: *exit,
                    reason,
                }));
            }
        }
        Ok(None)
    }

    pub(super) fn env<'a>(
        &'a self,
        state: &'a RunState,
        role: Option<NodeIndex>,
        output: Option<&'a Value>,
        item: Option<&'a Value>,
    ) -> Env<'a> {
        Env {
            workflow: self.workflow,
            state,
            workspace: self.workspace.root(),
            role,
            output,
            item,
            prompt: None,
        }
    }

    pub(super) fn route(
        &mut self,
        state: &mut RunState,
        from: NodeIndex,
    ) -> Result<Flow, StepError> {
        let mut exhausted = false;
        // An invalid outcome takes only invalid routes; a valid one never does.
        let invalid = self.workflow.is_json_llm(from)
            && state
                .outputs
                .get(&from.index())
                .is_some_and(eval::is_invalid_record);
        let mut any_invalid_route = false;
        for &id in &self.workflow.outgoing[from.index()] {
            let route = &self.workflow.routes[id];
            any_invalid_route |= route.on_invalid;
            if route.on_invalid != invalid {
                continue;
            }
            if let Some(max) = route.max
                && state.route_taken[id] >= max
            {
                exhausted = true;
                continue;
            }
            let holds = match &route.condition {
                Condition::Always | Condition::Otherwise => true,
                Condition::When { expr } => self
                    .env(state, Some(from), None, None)
                    .holds(expr)
                    .map_err(|e| {
                        e.step(format_args!(
                            "route condition `{}` of `{}`",
                            expr.text,
                            self.workflow.node(from).name
                        ))
                    })?,
            };
            if !holds {
                continue;
            }
            return Ok(self.take_route(state, from, id));
        }
        let name = &self.workflow.node(from).name;
        if invalid && !any_invalid_route {
            // Only an unchecked workflow gets here: `check` requires an invalid route.
            return Ok(Flow::Exit {
                node: self.builtin_exit("invalid_output"),
                reason: format!("`{name}` gave no valid output and has no invalid route"),
            });
        }
        if exhausted {
            Err(StepError::Limit(format!(
                "every route from `{name}` that could be taken has used its `max` bound"
            )))
        } else {
            Err(StepError::Failed(format!("no route from `{name}` holds")))
        }
    }

    /// Takes route `id` out of `from`: counted, recorded, and the position moved.
    fn take_route(&mut self, state: &mut RunState, from: NodeIndex, id: usize) -> Flow {
        let route = &self.workflow.routes[id];
        state.route_taken[id] += 1;
        let condition = match &route.condition {
            Condition::When { expr } => expr.text.as_str(),
            Condition::Otherwise => "otherwise",
            Condition::Always => "",
        };
        let from_name = &self.workflow.node(from).name;
        // Built only when something records or shows it: this is the per-step hot path.
        if self.wants_events() {
            let to = route
                .target
                .first_nodes()
                .iter()
                .map(|n| self.workflow.node(*n).name.clone())
                .collect();
            self.event(Event::Route {
                from: from_name.clone(),
                to,
                condition: condition.to_string(),
                route: id,
                backtrack: route.backtrack,
            });
        }
        match &route.target {
            RouteTarget::Node { node } if self.workflow.is_exit(*node) => Flow::Exit {
                node: *node,
                reason: if condition.is_empty() {
                    format!("routed from `{from_name}`")
                } else {
                    format!("`{condition}` holds")
                },
            },
            RouteTarget::Node { node } => {
                state.position = Position::Node { node: *node };
                Flow::Continue
            }
            RouteTarget::Parallel { .. } | RouteTarget::Map { .. } => {
                state.position = Position::Fork {
                    route: id,
                    done: BTreeMap::new(),
                };
                Flow::Continue
            }
        }
    }

    /// Runs the branches of a parallel or map route concurrently, checkpoints when all
    /// have finished, then applies them in order and continues at the join.
    pub(super) async fn fork(
        &mut self,
        state: &mut RunState,
        route_id: usize,
        mut done: BTreeMap<usize, state::BranchResult>,
    ) -> Result<Flow, StepError> {
        self.check_limits(state)?;
        let (branches, join) = self.branches(state, route_id)?;
        self.run_branches(state, &branches, &mut done).await?;
        state.position = Position::Fork {
            route: route_id,
            done: done.clone(),
        };
        self.settle(state);
        self.checkpoint(state).await?;
        // Every branch finished: their own containers (`per_branch`) are not needed any more.
        self.envs.release_branches().await;
        if let Some(flow) = self.apply_branches(state, route_id, done)? {
            return Ok(flow);
        }
        if let Some(flow) = self.exit_guards(state)? {
            mark_exit(state, &flow);
            self.checkpoint(state).await?;
            return Ok(flow);
        }
        state.position = Position::Node { node: join };
        self.checkpoint(state).await?;
        Ok(Flow::Continue)
    }

    /// The branches a fork starts (each role with its `map` item) and its join.
    fn branches(
        &self,
        state: &RunState,
        route_id: usize,
    ) -> Result<(Vec<Branch>, NodeIndex), StepError> {
        let route = &self.workflow.routes[route_id];
        match &route.target {
            RouteTarget::Parallel { branches, join } => {
                Ok((branches.iter().map(|b| (*b, None)).collect(), *join))
            }
            RouteTarget::Map { worker, over, join } => {
                let items = self
                    .env(state, None, None, None)
                    .value(over)
                    .map_err(|e| e.step(format_args!("`map ... over {}`", over.text)))?;
                let items = match items {
                    Value::Array(a) => a,
                    Value::Null => Vec::new(),
                    // `check` proves a typed `over` is a list: this one was typed `any`.
                    other => {
                        return Err(StepError::Invalid(format!(
                            "`map ... over {}` needs a list, got {other}",
                            over.text
                        )));
                    }
                };
                if let Some(max) = route.max
                    && items.len() as u64 > max
                {
                    return Err(StepError::Limit(format!(
                        "`map` over {} items exceeds its bound of {max}",
                        items.len()
                    )));
                }
                Ok((
                    items.into_iter().map(|i| (*worker, Some(i))).collect(),
                    *join,
                ))
            }
            RouteTarget::Node { .. } => Err(StepError::Failed("not a fork".into())),
        }
    }

    /// Executes, concurrently, every branch not already in `done` (a resumed fork keeps
    /// the branches that had finished) and adds their results to it.
    async fn run_branches(
        &self,
        state: &RunState,
        branches: &[Branch],
        done: &mut BTreeMap<usize, state::BranchResult>,
    ) -> Result<(), StepError> {
        // Branches of one role (a map) are its visits n+1, n+2, ... in item order.
        let visits: Vec<u64> = branches
            .iter()
            .enumerate()
            .map(|(i, (node, _))| {
                state.visits[node.index()]
                    + 1
                    + branches[..i].iter().filter(|(n, _)| n == node).count() as u64
            })
            .collect();
        let visits = &visits;
        let mut pending: FuturesUnordered<_> = branches
            .iter()
            .enumerate()
            .filter(|(i, _)| !done.contains_key(i))
            .map(|(i, (node, item))| async move {
                (
                    i,
                    *node,
                    item.clone(),
                    self.execute(state, *node, visits[i], item.as_ref(), Some(i))
                        .await,
                )
            })
            .collect();
        let mut finished = Vec::new();
        while let Some((i, node, item, result)) = pending.next().await {
            let run = result?;
            finished.push((
                i,
                state::BranchResult {
                    node,
                    output: run.output,
                    item,
                    tool: run.tool,
                    prompt: run.prompt,
                    record: run.record,
                },
            ));
        }
        drop(pending);
        done.extend(finished);
        Ok(())
    }

    /// Applies the finished branches in order. A branch cannot route, so an invalid
    /// outcome of one ends the run (the join's readers expect every branch's valid
    /// output): that exit is returned.
    fn apply_branches(
        &mut self,
        state: &mut RunState,
        route_id: usize,
        done: BTreeMap<usize, state::BranchResult>,
    ) -> Result<Option<Flow>, StepError> {
        if let Some(r) = done
            .values()
            .find(|r| self.workflow.is_json_llm(r.node) && eval::is_invalid_record(&r.output))
        {
            let name = self.workflow.node(r.node).name.clone();
            return Ok(Some(Flow::Exit {
                node: self.builtin_exit("invalid_output"),
                reason: format!(
                    "branch `{name}` gave no valid output, and a branch cannot route it"
                ),
            }));
        }
        // The worker's list starts empty and grows as its branches are applied.
        if let RouteTarget::Map { worker, .. } = &self.workflow.routes[route_id].target {
            state
                .outputs
                .insert(worker.index(), Value::Array(Vec::new()));
        }
        for (_, r) in done {
            let node = r.node;
            let run = RoleRun {
                output: r.output,
                tool: r.tool,
                prompt: r.prompt,
                record: r.record,
            };
            self.apply(state, node, run, r.item.as_ref())?;
        }
        Ok(None)
    }

    /// Executes a role without changing the state, within what is left of the run's
    /// wall time: past it, the step is abandoned (its tool processes killed) and the run
    /// ends at `limit`.
    pub(super) async fn execute(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
        branch: Option<usize>,
    ) -> Result<RoleRun, StepError> {
        let run = self.execute_role(state, node, visit, item, branch);
        let Some(max) = self.workflow.limits.max_wall_time_ms else {
            return run.await;
        };
        let used = self.elapsed_ms(state);
        let left = Duration::from_millis(max.saturating_sub(used));
        match tokio::time::timeout(left, run).await {
            Ok(result) => result,
            Err(_) => Err(StepError::Limit(format!(
                "the run reached max_wall_time ({max} ms) during `{}`",
                self.workflow.node(node).name
            ))),
        }
    }

    async fn execute_role(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
        branch: Option<usize>,
    ) -> Result<RoleRun, StepError> {
        let role = self
            .workflow
            .role(node)
            .ok_or_else(|| StepError::Failed("not a role".into()))?;
        let name = &self.workflow.node(node).name;
        // Branches are applied, and so numbered, in their order.
        let step = state.step + 1 + branch.map_or(0, |b| b as u64);
        self.reporter
            .role_start(name, role.kind.name(), step, self.started);
        // The llm and tool futures are boxed: held inline they made every step's future
        // tens of kilobytes, copied several times a step (three quarters of a builtin
        // step's instructions).
        match &role.kind {
            RoleKind::Builtin => Ok(RoleRun::plain(Value::Null)),
            RoleKind::Llm(llm) => Box::pin(self.call_llm(state, node, llm, visit, item)).await,
            RoleKind::Tool(tool) => {
                let run = Box::pin(tools::run_tool_role(
                    self, state, node, tool, visit, item, branch,
                ));
                tokio::select! {
                    r = run => r,
                    _ = self.interrupt.notified() => Err(StepError::Interrupted),
                }
            }
        }
    }
}

/// A route into an exit is part of the step's checkpoint: a resume after it goes
/// straight to the exit and never runs the role again.
fn mark_exit(state: &mut RunState, flow: &Flow) {
    if let Flow::Exit { node, reason } = flow {
        state.position = Position::Exited {
            node: *node,
            reason: reason.clone(),
        };
    }
}

/// The exit a run reached, its code and why.
struct Ending {
    name: String,
    code: i32,
    reason: String,
}

impl Ending {
    fn recorded(&self) -> state::Ended {
        state::Ended {
            exit: self.name.clone(),
            code: self.code,
            reason: self.reason.clone(),
        }
    }
}

/// A branch of a fork: its role, and its item when the fork is a `map`.
type Branch = (NodeIndex, Option<Value>);
