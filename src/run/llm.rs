//! An llm role's call: render the prompt, keep within the budget, call the provider, parse
//! the reply, retry an invalid one; the tokens and cost it spent.

use petgraph::graph::NodeIndex;
use rondo_provider::{AttemptRecord, CallContext, ChatRequest, Message};
use serde_json::{Value, json};

use super::output;
use super::state::{self, RunState};
use super::{Interpreter, RoleRun, StepError};
use crate::compile::OutputFormat;

impl<'w> Interpreter<'w> {
    pub(super) async fn call_llm(
        &self,
        state: &RunState,
        node: NodeIndex,
        llm: &crate::compile::LlmRole,
        visit: u64,
        item: Option<&Value>,
    ) -> Result<RoleRun, StepError> {
        let name = self.workflow.node(node).name.clone();
        let profile = self
            .profile_of
            .get(&node.index())
            .cloned()
            .unwrap_or_else(|| "scripted".into());
        let limits = &self.workflow.limits;
        let mut last_error: Option<String> = None;
        let mut last_raw = String::new();
        let attempts = llm.retries + 1;
        for attempt in 1..=attempts {
            // A retry storm meets the wall time here even when every reply comes at once
            // (a scripted or cached provider never lets the step's timer fire).
            tokio::task::yield_now().await;
            if let Some(max) = limits.max_wall_time_ms
                && self.elapsed_ms(state) >= max
            {
                return Err(StepError::Limit(format!(
                    "the run reached max_wall_time ({max} ms) during `{name}` attempt {attempt}"
                )));
            }
            // The budget rule: an attempt starts only while what the run has spent —
            // every earlier attempt, valid or not, this role's included — is below the
            // budget, and (when the provider can estimate it) the attempt's worst case
            // stays within it.
            let spent = self.spent_so_far(state);
            if let Some(max) = limits.max_tokens
                && spent.input_tokens + spent.output_tokens >= max
            {
                return Err(StepError::Limit(format!(
                    "the run used its token budget (max_tokens = {max}) before `{name}` attempt {attempt}"
                )));
            }
            if let Some(max) = limits.max_cost
                && spent.cost >= max
            {
                return Err(StepError::Limit(format!(
                    "the run used its cost budget (max_cost = {max}) before `{name}` attempt {attempt}"
                )));
            }
            let ctx = self.template_context(state, node, visit, item, last_error.as_deref());
            let mut messages = Vec::new();
            if let Some(system) = &llm.system {
                let text = self
                    .prompts
                    .render(&system.to_string_lossy(), &ctx)
                    .map_err(|e| {
                        StepError::Failed(format!("role `{name}`: system template: {e}"))
                    })?;
                let text = self.redactor.redact(&text).into_owned();
                messages.push(Message::system(text));
            }
            let prompt = self
                .prompts
                .render(&llm.prompt.to_string_lossy(), &ctx)
                .map_err(|e| {
                    StepError::Failed(format!(
                        "role `{name}`: template {}: {e}",
                        llm.prompt.display()
                    ))
                })?;
            // A tool's output, a file or an input holding a key never reaches a provider.
            let prompt = self.redactor.redact(&prompt).into_owned();
            messages.push(Message::user(prompt.clone()));
            let mut request = ChatRequest::new(messages);
            request.context = CallContext {
                role: name.clone(),
                visit: visit as u32,
            };
            if let OutputFormat::Json { ty } = &llm.output {
                request.response_schema = Some((name.clone(), ty.json_schema()));
            }
            // Stop before a call whose worst case would exceed a budget.
            if let Some(estimate) = self.pool.estimate(&profile, &request) {
                if let Some(max) = limits.max_cost
                    && spent.cost + estimate.max_cost > max
                {
                    return Err(StepError::Limit(format!(
                        "the next call of `{name}` could cost up to ${:.4}, past max_cost = {max}",
                        estimate.max_cost
                    )));
                }
                let used = spent.input_tokens + spent.output_tokens;
                if let Some(max) = limits.max_tokens
                    && used + estimate.max_tokens() > max
                {
                    return Err(StepError::Limit(format!(
                        "the next call of `{name}` could use up to {} tokens, past max_tokens = {max} ({used} used)",
                        estimate.max_tokens()
                    )));
                }
            }
            let mut records: Vec<AttemptRecord> = Vec::new();
            let mut sink = |r: AttemptRecord| records.push(r);
            // On a terminal the reply is shown as it arrives; the parsed result is the same.
            let show_delta = |delta: &str| self.reporter.delta(&name, delta);
            let stream: Option<rondo_provider::StreamCallback> = if self.reporter.live() {
                Some(&show_delta)
            } else {
                None
            };
            let call = self.pool.complete(&profile, &request, stream, &mut sink);
            let completion = tokio::select! {
                c = call => c,
                _ = self.interrupt.notified() => return Err(StepError::Interrupted),
            };
            self.reporter.attempts(&records);
            let completion = match completion {
                Ok(c) => c,
                Err(e) => {
                    self.buffer_event("llm_failed", json!({"role": name, "visit": visit, "profile": profile, "error": e.to_string(), "attempts": records}));
                    return Err(StepError::Failed(format!(
                        "role `{name}`: the provider call failed: {e}"
                    )));
                }
            };
            let max_reply = llm.max_reply.unwrap_or(crate::compile::DEFAULT_MAX_REPLY);
            let max_reply = usize::try_from(max_reply).unwrap_or(usize::MAX);
            let oversized = completion.response.content.len() > max_reply;
            // Only a bounded reply is kept: in the record, the state and the journal.
            let raw = self
                .redactor
                .redact(&output::cut_reply(&completion.response.content, max_reply))
                .into_owned();
            let usage = completion.response.usage;
            if let Ok(mut spent) = self.spent.lock() {
                spent.llm_calls += 1;
                spent.input_tokens += usage.input_tokens;
                spent.output_tokens += usage.output_tokens;
                spent.cost += completion.cost;
            }
            let record = json!({
                "role": name, "visit": visit, "attempt": attempt, "profile": completion.profile,
                "model": completion.response.model, "prompt": prompt, "raw": raw,
                "usage": usage, "cost": completion.cost, "attempts": records,
            });
            let parsed = if oversized && matches!(llm.output, OutputFormat::Json { .. }) {
                Err(format!(
                    "the reply is {} bytes, more than max_reply = {max_reply}",
                    completion.response.content.len()
                ))
            } else {
                output::parse(&llm.output, &raw, &llm.coerce)
            };
            // A reply the role's own updates refuse (a whiteboard batch against its rules)
            // goes back to the model with the reason, like a reply of the wrong shape.
            let parsed =
                parsed.and_then(
                    |reply| match self.refused_updates(state, node, &reply.0, item) {
                        Some(reason) => Err(format!("the reply cannot be applied: {reason}")),
                        None => Ok(reply),
                    },
                );
            match parsed {
                Ok((value, how, coercions)) => {
                    let mut record = record;
                    record["parsed"] = json!(how);
                    record["coercions"] = json!(coercions);
                    return Ok(RoleRun {
                        output: value,
                        tool: None,
                        prompt: Some(prompt),
                        record: Some(record),
                    });
                }
                Err(e) => {
                    last_error = Some(e.clone());
                    last_raw = raw;
                    self.reporter.event(
                        "invalid_output",
                        &json!({"role": name, "attempt": attempt, "error": e}),
                    );
                    // Failed attempts are recorded at apply time through the run's event log;
                    // past a few, only their number (memory holds them until then).
                    if attempt <= RECORDED_INVALID_ATTEMPTS {
                        self.failed_attempts_note(&record, &e);
                    }
                }
            }
        }
        if attempts > RECORDED_INVALID_ATTEMPTS {
            self.buffer_event(
                "invalid_output_omitted",
                json!({"role": name, "visit": visit, "attempts": attempts - RECORDED_INVALID_ATTEMPTS}),
            );
        }
        // Only JSON can be invalid: the outcome is the invalid record, routed by `X.invalid`.
        Ok(RoleRun::plain(json!({
            "invalid": true,
            "raw": last_raw,
            "error": last_error.unwrap_or_default(),
            "attempts": attempts,
        })))
    }

    /// The state's totals plus the attempts not settled yet.
    fn spent_so_far(&self, state: &RunState) -> state::Totals {
        let mut t = state.totals.clone();
        if let Ok(p) = self.spent.lock() {
            t.llm_calls += p.llm_calls;
            t.input_tokens += p.input_tokens;
            t.output_tokens += p.output_tokens;
            t.cost += p.cost;
        }
        t
    }

    /// Moves the attempts' spending into the state's totals.
    pub(super) fn settle(&mut self, state: &mut RunState) {
        let p = self.spent.get_mut().map(std::mem::take).unwrap_or_default();
        state.totals.llm_calls += p.llm_calls;
        state.totals.input_tokens += p.input_tokens;
        state.totals.output_tokens += p.output_tokens;
        state.totals.cost += p.cost;
    }

    fn failed_attempts_note(&self, record: &Value, error: &str) {
        let mut r = record.clone();
        r["error"] = Value::String(error.to_string());
        self.buffer_event("invalid_output", r);
    }
}

/// Invalid attempts of one call recorded in full; the rest are counted.
const RECORDED_INVALID_ATTEMPTS: u64 = 20;
