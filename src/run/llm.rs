//! An llm role's call: render the prompt, keep within the budget, call the provider, parse
//! the reply, retry an invalid one; the tokens and cost it spent.

use petgraph::graph::NodeIndex;
use rondo_provider::{
    AttemptRecord, CallContext, ChatRequest, ChatResponse, Completion, LimitExceeded, Message,
    ProviderError, Spend, ToolDef,
};
use serde_json::{Value, json};

use super::events::{Event, LlmCall, LlmResponse};
use super::output::{self, Parsed, ParsedReply};
use super::scripted;
use super::state::RunState;
use super::{Interpreter, RoleRun, StepError};
use crate::compile::OutputFormat;

/// One llm role's turn: what every attempt of it shares.
struct Turn<'a> {
    state: &'a RunState,
    node: NodeIndex,
    llm: &'a crate::compile::LlmRole,
    name: &'a str,
    visit: u64,
    item: Option<&'a Value>,
    /// The largest reply kept, in bytes.
    max_reply: usize,
}

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
        let max_reply = llm.max_reply.unwrap_or(crate::compile::DEFAULT_MAX_REPLY);
        let turn = Turn {
            state,
            node,
            llm,
            name: &name,
            visit,
            item,
            max_reply: usize::try_from(max_reply).unwrap_or(usize::MAX),
        };
        let mut last_error: Option<String> = None;
        let mut last_raw = String::new();
        let attempts = llm.retries + 1;
        for attempt in 1..=attempts {
            // A retry storm meets the wall time here even when every reply comes at once
            // (a scripted or cached provider never lets the step's timer fire).
            tokio::task::yield_now().await;
            let spent = self.attempt_may_start(&turn, attempt)?;
            let (request, prompt) = self.llm_request(&turn, last_error.as_deref())?;
            // Stop before a call whose worst case would exceed a budget.
            if let Some(estimate) = self.pool.estimate(&profile, &request) {
                self.workflow
                    .limits
                    .budget
                    .check(&spent, &estimate)
                    .map_err(|e| {
                        StepError::Limit(match e {
                            LimitExceeded::Cost { limit, next, .. } => format!(
                                "the next call of `{name}` could cost up to ${next:.4}, past max_cost = {limit}"
                            ),
                            LimitExceeded::Tokens { limit, spent, next } => format!(
                                "the next call of `{name}` could use up to {next} tokens, past max_tokens = {limit} ({spent} used)"
                            ),
                        })
                    })?;
            }
            let (completion, records) = self.complete(&turn, &profile, &request).await?;
            let completion = match completion {
                Ok(c) => c,
                // A reply too deep to read is a bad reply like any other: asked again,
                // then the role's invalid outcome.
                Err(e) if e.kind() == rondo_provider::ErrorKind::UnreadableReply => {
                    let error = e.to_string();
                    self.reporter.invalid_reply(&name, attempt, &error);
                    if attempt <= RECORDED_INVALID_ATTEMPTS {
                        self.record_unreadable(&turn, attempt, &profile, &prompt, records, &error);
                    }
                    last_error = Some(error);
                    last_raw = String::new();
                    continue;
                }
                Err(e) => return Err(self.provider_failed(&turn, &profile, records, &e)),
            };
            let (call, raw, oversized) =
                self.record_reply(&turn, attempt, &request, &completion, &prompt, records);
            match self.parse_reply(&turn, &completion.response, &raw, oversized) {
                Ok((value, parsed, coercions)) => {
                    return Ok(RoleRun {
                        output: value,
                        tool: None,
                        prompt,
                        record: Some(Box::new(LlmResponse {
                            call,
                            parsed,
                            coercions,
                        })),
                    });
                }
                Err(e) => {
                    self.reporter.invalid_reply(&name, attempt, &e);
                    // Failed attempts are recorded at apply time through the run's event log;
                    // past a few, only their number (memory holds them until then).
                    if attempt <= RECORDED_INVALID_ATTEMPTS {
                        self.buffer_event(Event::InvalidOutput {
                            call,
                            error: e.clone(),
                        });
                    }
                    last_error = Some(e);
                    last_raw = raw;
                }
            }
        }
        self.no_usable_reply(&turn, attempts, last_error, last_raw)
    }

    /// Whether another attempt may start, by the wall time and the budget; what the run has
    /// spent so far.
    fn attempt_may_start(&self, turn: &Turn<'_>, attempt: u64) -> Result<Spend, StepError> {
        let (limits, name) = (&self.workflow.limits, turn.name);
        if let Some(max) = limits.max_wall_time_ms
            && self.elapsed_ms(turn.state) >= max
        {
            return Err(StepError::Limit(format!(
                "the run reached max_wall_time ({max} ms) during `{name}` attempt {attempt}"
            )));
        }
        // The budget rule: an attempt starts only while what the run has spent —
        // every earlier attempt, valid or not, this role's included — is below the
        // budget, and (when the provider can estimate it) the attempt's worst case
        // stays within it.
        let spent = self.spent_so_far(turn.state);
        limits.budget.check_spent(&spent).map_err(|e| {
            StepError::Limit(match e {
                LimitExceeded::Tokens { limit, .. } => format!(
                    "the run used its token budget (max_tokens = {limit}) before `{name}` attempt {attempt}"
                ),
                LimitExceeded::Cost { limit, .. } => format!(
                    "the run used its cost budget (max_cost = {limit}) before `{name}` attempt {attempt}"
                ),
            })
        })?;
        Ok(spent)
    }

    /// The request of one attempt (`last_error` is why the one before failed), and the
    /// prompt it sends as the user's message, when the role has one.
    fn llm_request(
        &self,
        turn: &Turn<'_>,
        last_error: Option<&str>,
    ) -> Result<(ChatRequest, Option<String>), StepError> {
        let (llm, name) = (turn.llm, turn.name);
        let ctx = self.template_context(turn.state, turn.node, turn.visit, turn.item, last_error);
        let mut messages = Vec::new();
        if let Some(system) = &llm.system {
            let text = self
                .prompts
                .render(&system.to_string_lossy(), &ctx)
                .map_err(|e| e.step(format_args!("role `{name}`: system template")))?;
            let text = self.redactor.redact(&text).into_owned();
            messages.push(Message::system(text));
        }
        // The conversation, then this turn's prompt as the user's message.
        if let Some(id) = llm.conversation
            && let Some(super::memory::MemoryValue::Conversation(chat)) = turn.state.memory.get(id)
        {
            // Tool results and updates may have brought a key in since it was stored.
            messages.extend(chat.iter().map(|m| Message {
                content: self.redactor.redact(&m.content).into_owned(),
                ..m.clone()
            }));
        }
        let prompt = match &llm.prompt {
            Some(template) => {
                let text = self
                    .prompts
                    .render(&template.to_string_lossy(), &ctx)
                    .map_err(|e| {
                        e.step(format_args!(
                            "role `{name}`: template {}",
                            template.display()
                        ))
                    })?;
                // A tool's output, a file or an input holding a key never reaches a provider.
                let text = self.redactor.redact(&text).into_owned();
                messages.push(Message::user(text.clone()));
                Some(text)
            }
            None => None,
        };
        let mut request = ChatRequest::new(messages);
        request.max_reply = Some(turn.max_reply);
        request.context = CallContext {
            role: name.to_string(),
            visit: turn.visit as u32,
            run: self.run_dir.to_string_lossy().into_owned(),
        };
        if let OutputFormat::Json { ty } = &llm.output {
            request.response_schema = Some((name.to_string(), ty.json_schema()));
        }
        if llm.mode.native() {
            request.tools = self.tool_defs(&llm.tools);
        }
        Ok((request, prompt))
    }

    /// Calls the provider chain of `profile`, showing each attempt as it ends (so a wait
    /// before a retry is not silence) and, on a terminal, the reply as it arrives; the
    /// completion and the record of every attempt.
    async fn complete(
        &self,
        turn: &Turn<'_>,
        profile: &str,
        request: &ChatRequest,
    ) -> Result<(Result<Completion, ProviderError>, Vec<AttemptRecord>), StepError> {
        let mut records: Vec<AttemptRecord> = Vec::new();
        let chain = self.pool.chain(profile);
        let reporter = &self.reporter;
        let spent_cell = &self.spent;
        let mut sink = |r: AttemptRecord| {
            // A failed attempt the provider probably billed counts towards the budgets.
            if let (Some(s), Ok(mut spent)) = (r.failed_spend(), spent_cell.lock()) {
                *spent += s;
            }
            let next = chain
                .iter()
                .position(|p| *p == r.profile)
                .and_then(|i| chain.get(i + 1));
            reporter.attempt(&r, next.map(String::as_str));
            records.push(r);
        };
        // The parsed result is the same streamed or not. A map's branches stream at once:
        // each reply is labelled with its visit.
        let label = match turn.item {
            Some(_) => format!("{} #{}", turn.name, turn.visit),
            None => turn.name.to_string(),
        };
        let show_delta = |delta: &str| self.reporter.delta(&label, delta);
        let stream: Option<rondo_provider::StreamCallback> = if self.reporter.live() {
            Some(&show_delta)
        } else {
            None
        };
        let call = self.pool.complete(profile, request, stream, &mut sink);
        let completion = tokio::select! {
            c = call => c,
            _ = self.interrupt.notified() => return Err(StepError::Interrupted),
        };
        Ok((completion, records))
    }

    /// Records an attempt whose reply could not be read as invalid output.
    fn record_unreadable(
        &self,
        turn: &Turn<'_>,
        attempt: u64,
        profile: &str,
        prompt: &Option<String>,
        records: Vec<AttemptRecord>,
        error: &str,
    ) {
        let profile = records
            .last()
            .map_or(profile.to_string(), |r| r.profile.clone());
        let model = self
            .pool
            .profile(&profile)
            .map(|p| p.model.clone())
            .unwrap_or_default();
        self.buffer_event(Event::InvalidOutput {
            call: LlmCall {
                role: turn.name.to_string(),
                visit: turn.visit,
                attempt,
                profile,
                model,
                prompt: prompt.clone().unwrap_or_default(),
                raw: String::new(),
                tool_calls: None,
                usage: Default::default(),
                cost: 0.0,
                attempts: records,
            },
            error: error.to_string(),
        });
    }

    /// Records a provider call that failed, and the error that ends the step: which
    /// profile, model and server failed last, so a wrong `base_url` or a local server that
    /// is not running says so.
    fn provider_failed(
        &self,
        turn: &Turn<'_>,
        profile: &str,
        records: Vec<AttemptRecord>,
        e: &ProviderError,
    ) -> StepError {
        let (name, visit) = (turn.name, turn.visit);
        let last = records
            .last()
            .map_or(profile.to_string(), |r| r.profile.clone());
        let last = last.as_str();
        let called = match self.pool.profile(last) {
            Some(p) => {
                let url = p.endpoint().map(|u| format!(" at {u}")).unwrap_or_default();
                format!("profile `{last}`, model `{}`{url}", p.model)
            }
            None => format!("profile `{last}`"),
        };
        let message = format!("role `{name}`: the provider call failed ({called}): {e}");
        // The scripted provider fails only when it has no reply: the replies
        // ran out, a bound of the run like its budget, not a fault to resume.
        let ran_out =
            e.kind() == rondo_provider::ErrorKind::Config && self.is_scripted_profile(last);
        self.buffer_event(Event::LlmFailed {
            role: name.to_string(),
            visit,
            profile: profile.to_string(),
            error: e.to_string(),
            attempts: records,
        });
        if ran_out {
            return StepError::Limit(format!(
                "the scripted replies ran out: no reply for role `{name}`, visit {visit}"
            ));
        }
        StepError::Failed(self.redactor.redact(&message).into_owned())
    }

    /// Counts what a reply spent and records it, bounded and redacted; the record, the
    /// reply as kept, and whether it was too long.
    fn record_reply(
        &self,
        turn: &Turn<'_>,
        attempt: u64,
        request: &ChatRequest,
        completion: &Completion,
        prompt: &Option<String>,
        records: Vec<AttemptRecord>,
    ) -> (LlmCall, String, bool) {
        let response = &completion.response;
        let native = turn.llm.mode.native();
        // A native reply's calls count towards its size in their scripted form.
        let text = if native && !response.tool_calls.is_empty() {
            scripted::tool_call_reply(&response.content, &response.tool_calls)
        } else {
            response.content.clone()
        };
        let oversized = response.truncated || text.len() > turn.max_reply;
        // Only a bounded reply is kept: in the record, the state and the journal. The
        // calls of a reply to tools offered natively are recorded as they came, apart
        // from its text; a reply too long is kept cut, calls included, as text.
        let offered = !request.tools.is_empty() || !response.tool_calls.is_empty();
        let (raw, tool_calls) = if native && offered && !oversized {
            let mut calls = response.tool_calls.clone();
            for call in &mut calls {
                self.redactor.redact_json(&mut call.arguments);
                call.name = self.redactor.redact(&call.name).into_owned();
                call.id = self.redactor.redact(&call.id).into_owned();
            }
            (response.content.clone(), Some(calls))
        } else {
            (
                output::cut_reply(&text, turn.max_reply, response.truncated),
                None,
            )
        };
        let raw = self.redactor.redact(&raw).into_owned();
        let usage = response.usage;
        if let Ok(mut spent) = self.spent.lock() {
            *spent += Spend {
                calls: 1,
                usage,
                cost: completion.cost,
            };
        }
        let call = LlmCall {
            role: turn.name.to_string(),
            visit: turn.visit,
            attempt,
            profile: completion.profile.clone(),
            model: response.model.clone(),
            prompt: prompt.clone().unwrap_or_default(),
            raw: raw.clone(),
            tool_calls,
            usage,
            cost: completion.cost,
            attempts: records,
        };
        (call, raw, oversized)
    }

    /// The role's output from a reply (`raw` as kept), or why it is not usable.
    fn parse_reply(
        &self,
        turn: &Turn<'_>,
        response: &ChatResponse,
        raw: &str,
        oversized: bool,
    ) -> Result<ParsedReply, String> {
        let llm = turn.llm;
        let native = llm.mode.native();
        // A cut script or object is not the model's answer: only prose survives a cut.
        let parsed = if oversized && (native || !matches!(llm.output, OutputFormat::Text)) {
            Err(format!(
                "the reply is longer than max_reply = {} bytes",
                turn.max_reply
            ))
        } else if native {
            Ok(native_output(response))
        } else if response.content.trim().is_empty() && !response.tool_calls.is_empty() {
            // Tools were not offered natively: calls are not an answer, empty or not.
            let names: Vec<&str> = response
                .tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            Err(format!(
                "the reply holds only tool calls ({}) and no answer; this role does not take native tool calls (`mode = json`)",
                names.join(", ")
            ))
        } else {
            output::parse(&llm.output, raw, &llm.coerce)
        };
        // A reply the role's own updates refuse (a whiteboard batch against its rules)
        // goes back to the model with the reason, like a reply of the wrong shape.
        parsed.and_then(|reply| {
            match self.refused_updates(turn.state, turn.node, &reply.0, turn.item) {
                Some(reason) => Err(format!("the reply cannot be applied: {reason}")),
                None => Ok(reply),
            }
        })
    }

    /// The outcome once every attempt gave an invalid reply.
    fn no_usable_reply(
        &self,
        turn: &Turn<'_>,
        attempts: u64,
        last_error: Option<String>,
        last_raw: String,
    ) -> Result<RoleRun, StepError> {
        let (llm, name) = (turn.llm, turn.name);
        if attempts > RECORDED_INVALID_ATTEMPTS {
            self.buffer_event(Event::InvalidOutputOmitted {
                role: name.to_string(),
                visit: turn.visit,
                attempts: attempts - RECORDED_INVALID_ATTEMPTS,
            });
        }
        // Only JSON can be invalid: the outcome is the invalid record, routed by `X.invalid`.
        // A text or native role has no invalid route: what its replies lacked (a reply too
        // long, one its updates refuse) ends the run at `invalid_output`.
        if llm.output.structured().is_none() || llm.mode.native() {
            return Err(StepError::Invalid(format!(
                "role `{name}`: no usable reply in {attempts} attempt(s): {}",
                last_error.unwrap_or_default()
            )));
        }
        Ok(RoleRun::plain(json!({
            "invalid": true,
            "raw": last_raw,
            "error": last_error.unwrap_or_default(),
            "attempts": attempts,
        })))
    }

    /// A profile served by the scripted provider (`scripted`, or one of `kind = "scripted"`).
    pub(super) fn is_scripted_profile(&self, name: &str) -> bool {
        self.workflow
            .providers
            .iter()
            .any(|p| p.name() == name && p.profile.kind == rondo_provider::ProviderKind::Scripted)
    }

    /// The tools a native role offers, in the provider-neutral form each protocol translates.
    fn tool_defs(&self, tools: &[usize]) -> Vec<ToolDef> {
        tools
            .iter()
            .filter_map(|&t| self.workflow.tools.get(t))
            .map(|tool| ToolDef {
                name: tool.name().to_string(),
                description: tool.spec.usage.trim().to_string(),
                parameters: tool
                    .input_schema()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            })
            .collect()
    }

    /// The state's totals plus the attempts not settled yet.
    fn spent_so_far(&self, state: &RunState) -> Spend {
        let mut spent = state.totals.spend();
        if let Ok(pending) = self.spent.lock() {
            spent += *pending;
        }
        spent
    }

    /// Moves the attempts' spending into the state's totals.
    pub(super) fn settle(&mut self, state: &mut RunState) {
        let pending = self.spent.get_mut().map(std::mem::take).unwrap_or_default();
        state.totals.add(pending);
    }
}

/// A native role's output: the reply's text and its calls as `{id, tool, args}`.
fn native_output(response: &rondo_provider::ChatResponse) -> output::ParsedReply {
    let calls: Vec<Value> = response
        .tool_calls
        .iter()
        .map(|c| json!({"id": c.id, "tool": c.name, "args": c.arguments}))
        .collect();
    (
        json!({"text": response.content, "calls": calls}),
        Parsed::Native,
        Vec::new(),
    )
}

/// Invalid attempts of one call recorded in full; the rest are counted.
const RECORDED_INVALID_ATTEMPTS: u64 = 20;
