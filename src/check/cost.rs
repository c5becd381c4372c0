//! The proven worst case of a run in tokens and money (`rondo check --cost`, `budget`).
//!
//! Per llm role: visits (the bound `check` proves for loops) × attempts (`retries` + 1) ×
//! what one attempt can spend on every profile of its chain (each tried up to its
//! `retry.max_attempts` times, every try possibly billed), priced with each profile's own
//! prices. What one try can spend:
//!
//! - input tokens ≤ the bytes sent (system and user prompts, the conversation, native tool
//!   definitions, the reply schema) + [`TOKENS_PER_MESSAGE`] per message +
//!   [`TOKENS_PER_CALL`]: a BPE or SentencePiece tokenizer (with byte fallback) never makes
//!   more tokens than bytes, and the rest is the provider's framing;
//! - a prompt's bytes ≤ its template's static text plus the bound of every value it renders,
//!   found by walking the template (loops × their bodies, the larger branch of an `if`,
//!   includes, filters); a template never renders more than [`MAX_RENDERED`], which the
//!   engine enforces, so a value without a bound makes that the figure and is reported;
//! - output tokens ≤ the profile's `max_tokens` (providers stop there, and a reply read in
//!   part is never counted past it); a profile without `max_tokens` has no output bound,
//!   which costs nothing only when its output price is 0.

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::graph::NodeIndex;
use serde::Serialize;
use tera::ast::{Expr, ExprVal, FunctionCall, Node};

use crate::compile::types::Type;
use crate::compile::{
    DEFAULT_MAX_REPLY, MaxVisits, MemoryKind, OutputFormat, RoleKind, RouteTarget, Workflow,
};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, ExternalLabel};
use crate::prompt::{MAX_PAD_WIDTH, MAX_RANGE, MAX_RENDERED, Prompts};
use crate::source::Span;

/// Framing tokens a provider adds per message (role markers, separators).
pub const TOKENS_PER_MESSAGE: u64 = 16;
/// Tokens a provider adds to a call (its own preamble for tools or a reply format).
pub const TOKENS_PER_CALL: u64 = 1024;
/// Bytes a conversation's message holds besides what its `max_bytes` counts (its role,
/// a tool call's id, a result's `tool_call_id`): ids as providers make them are well under.
pub const CONVERSATION_MESSAGE_EXTRA: u64 = 256;
/// `last_error` as a template sees it is cut to this many bytes (the engine cuts it).
pub const MAX_LAST_ERROR: u64 = 4096;
/// The longest a float renders in a template (Rust prints every digit: `5e-324` is 326).
const FLOAT_TEXT: u64 = 350;
const INT_TEXT: u64 = 21;
/// The most a number's printed text weighs per byte of its JSON (see [`render_factor`]).
const NUMBER_TEXT_FACTOR: u64 = 62;
/// A run id is a folder name.
const RUN_ID_TEXT: u64 = 255;
const MAX_DEPTH: usize = 32;

/// The worst case of one llm role.
#[derive(Debug, Clone, Serialize)]
pub struct RoleCost {
    pub role: String,
    /// Worst-case visits (`None`: not bounded, e.g. a map over a list of unknown length).
    pub visits: Option<u64>,
    /// Attempts per visit: `retries` + 1.
    pub attempts: u64,
    /// The profiles a call may use (its chain; every declared one under `provider_env`).
    pub profiles: Vec<String>,
    /// Bytes of the largest request (prompts, conversation, tools, schema).
    pub max_prompt_bytes: u64,
    /// Some rendered value has no bound: the template's cap stands in for it.
    pub prompt_capped: bool,
    pub input_tokens_per_attempt: u64,
    pub output_tokens_per_attempt: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    /// `max_cost` at the prices the file declares, for profiles that read theirs from the
    /// environment (`price_env`) when a run starts: proven only at those prices.
    pub max_cost_declared: Option<f64>,
}

/// The worst case of a run, role by role.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CostReport {
    pub roles: Vec<RoleCost>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    /// See [`RoleCost::max_cost_declared`].
    pub max_cost_declared: Option<f64>,
    /// Inputs whose default the visit bounds use (`max_visits = input.N`).
    pub visits_by_inputs: Vec<String>,
    /// Profiles that write no price and are priced from the table of default prices
    /// (`config/model_prices.yaml`): their figures are estimates.
    pub estimated_prices: Vec<String>,
    /// Why a figure is missing or capped: each value without a bound, where it is.
    #[serde(skip)]
    pub unbounded: Vec<Diagnostic>,
}

impl CostReport {
    pub fn role(&self, name: &str) -> Option<&RoleCost> {
        self.roles.iter().find(|r| r.role == name)
    }

    /// `$1.2345`, or `unbounded`.
    pub fn money(v: Option<f64>) -> String {
        match v {
            Some(v) => format!("${v:.4}"),
            None => "unbounded".into(),
        }
    }

    pub fn count(v: Option<u64>) -> String {
        match v {
            Some(u64::MAX) => "overflow".into(),
            Some(v) => v.to_string(),
            None => "unbounded".into(),
        }
    }

    /// The table `rondo check --cost` prints.
    pub fn table(&self) -> String {
        let mut rows = vec![[
            "role".to_string(),
            "visits".into(),
            "attempts".into(),
            "input tokens".into(),
            "output tokens".into(),
            "max $".into(),
        ]];
        for r in &self.roles {
            rows.push([
                r.role.clone(),
                Self::count(r.visits),
                r.attempts.to_string(),
                Self::count(r.input_tokens),
                Self::count(r.output_tokens),
                Self::money(r.max_cost),
            ]);
        }
        rows.push([
            "run".into(),
            String::new(),
            String::new(),
            Self::count(self.input_tokens),
            Self::count(self.output_tokens),
            Self::money(self.max_cost),
        ]);
        let widths: Vec<usize> = (0..6)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (n, row) in rows.iter().enumerate() {
            if n + 1 == rows.len() {
                let total: usize = widths.iter().sum::<usize>() + 2 * 5;
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
            let mut line = format!("{:<w$}", row[0], w = widths[0]);
            for i in 1..6 {
                line.push_str(&format!("  {:>w$}", row[i], w = widths[i]));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if self.max_cost.is_none()
            && let Some(declared) = self.max_cost_declared
        {
            out.push_str(&format!(
                "at the prices the file declares (`price_env` may set others when a run starts): at most {}\n",
                Self::money(Some(declared))
            ));
        }
        if !self.visits_by_inputs.is_empty() {
            out.push_str(&format!(
                "visits use the default of input {}: a run given more visits more\n",
                self.visits_by_inputs
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.estimated_prices.is_empty() {
            out.push_str(&format!(
                "estimated: {}: no price written, priced from the table of default prices ({})\n",
                self.estimated_prices.join(", "),
                rondo_provider::prices::TABLE_PATH
            ));
        }
        out
    }
}

/// The worst case of every llm role and of the run.
pub fn analyse(workflow: &Workflow) -> CostReport {
    let prompts = Prompts::for_workflow(workflow);
    let bounds = super::graph::visit_bounds(workflow);
    let mut report = CostReport {
        input_tokens: Some(0),
        output_tokens: Some(0),
        max_cost: Some(0.0),
        max_cost_declared: Some(0.0),
        ..CostReport::default()
    };
    for (index, role) in workflow.roles() {
        if let Some(MaxVisits::Input(id)) = role.max_visits
            && let Some(input) = workflow.inputs.get(id)
            && !report.visits_by_inputs.contains(&input.name)
        {
            report.visits_by_inputs.push(input.name.clone());
        }
        let RoleKind::Llm(llm) = &role.kind else {
            continue;
        };
        let visits = bounds.get(&index).copied().flatten();
        let role = role_cost(workflow, &prompts, index, llm, visits, &mut report);
        report.add(role);
    }
    report
}

impl CostReport {
    /// Records why a figure is missing or capped, once per reason.
    fn note(&mut self, d: Diagnostic) {
        if !self
            .unbounded
            .iter()
            .any(|u| u.code == d.code && u.message == d.message)
        {
            self.unbounded.push(d);
        }
    }

    /// Adds a role's figures to the run's.
    fn add(&mut self, role: RoleCost) {
        self.max_cost_declared = match (self.max_cost_declared, role.max_cost_declared) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.input_tokens = add_opt(self.input_tokens, role.input_tokens);
        self.output_tokens = add_opt(self.output_tokens, role.output_tokens);
        self.max_cost = match (self.max_cost, role.max_cost) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.roles.push(role);
    }
}

/// One llm role: its request's size, what an attempt spends on its profiles, times its calls.
fn role_cost(
    workflow: &Workflow,
    prompts: &Prompts,
    index: NodeIndex,
    llm: &crate::compile::LlmRole,
    visits: Option<u64>,
    report: &mut CostReport,
) -> RoleCost {
    let name = workflow.node(index).name.clone();
    if visits.is_none() {
        report.note(
            Diagnostic::warning(
                Code::CostUnbounded,
                format!("the visits of `{name}` have no bound, nor has what it costs"),
            )
            .label(
                workflow.node(index).span,
                "visited an unbounded number of times",
            )
            .help("bound the route that reaches it (`max N`) or the list a map goes over"),
        );
    }
    let attempts = llm.retries.saturating_add(1);
    let request = request_size(workflow, prompts, index, llm, report);
    let input_per_try = request
        .bytes
        .saturating_add(request.messages.saturating_mul(TOKENS_PER_MESSAGE))
        .saturating_add(TOKENS_PER_CALL);
    let attempt = attempt_cost(workflow, llm, input_per_try, report);
    let calls = visits.map(|v| v.saturating_mul(attempts));
    let priced = |per: Option<f64>| match (calls, per) {
        (_, Some(c)) if c <= 0.0 => Some(0.0),
        (Some(n), Some(c)) => Some(n as f64 * c),
        _ => None,
    };
    RoleCost {
        role: name,
        visits,
        attempts,
        profiles: attempt.profiles,
        max_prompt_bytes: request.bytes,
        prompt_capped: request.capped,
        input_tokens_per_attempt: input_per_try,
        output_tokens_per_attempt: attempt.out_per_try,
        input_tokens: calls.map(|c| c.saturating_mul(attempt.input)),
        output_tokens: mul_opt(calls, attempt.output),
        max_cost: priced(attempt.cost),
        max_cost_declared: priced(attempt.declared),
    }
}

/// The largest request of a role: its bytes and messages.
struct Request {
    bytes: u64,
    /// Some rendered value has no bound: the template's cap stands in for it.
    capped: bool,
    messages: u64,
}

/// Prompts (each at most the engine's cap), conversation, native tool definitions, schema.
fn request_size(
    workflow: &Workflow,
    prompts: &Prompts,
    index: NodeIndex,
    llm: &crate::compile::LlmRole,
    report: &mut CostReport,
) -> Request {
    let mut walker = Walker::new(workflow, prompts, index);
    let mut r = Request {
        bytes: 0,
        capped: false,
        messages: 0,
    };
    for template in llm.system.iter().chain(llm.prompt.iter()) {
        let file = template.to_string_lossy().replace('\\', "/");
        r.messages += 1;
        let bound = walker.template(&file, 0).text;
        let cap = MAX_RENDERED as u64;
        let bytes = match bound {
            Some(b) if b <= cap => b,
            _ => {
                r.capped = true;
                cap
            }
        };
        r.bytes = r.bytes.saturating_add(bytes);
    }
    for d in walker.found.drain(..) {
        report.note(d);
    }
    if let Some(id) = llm.conversation
        && let Some(MemoryKind::Conversation {
            max_messages,
            max_bytes,
        }) = workflow.memory.get(id).map(|m| &m.kind)
    {
        r.messages = r.messages.saturating_add(*max_messages);
        r.bytes = r
            .bytes
            .saturating_add(*max_bytes)
            .saturating_add(max_messages.saturating_mul(CONVERSATION_MESSAGE_EXTRA));
    }
    if llm.mode.native() {
        for &t in &llm.tools {
            if let Some(tool) = workflow.tools.get(t) {
                let schema = tool.input_schema().map_or(40, |s| s.to_string().len());
                r.bytes = r
                    .bytes
                    .saturating_add((tool.name().len() + tool.spec.usage.len() + schema) as u64);
            }
        }
    }
    if let OutputFormat::Json { ty } = &llm.output {
        r.bytes = r
            .bytes
            .saturating_add(ty.json_schema().to_string().len() as u64);
    }
    r
}

/// What one attempt can spend: the worst of the chains it may start on.
struct Attempt {
    input: u64,
    output: Option<u64>,
    cost: Option<f64>,
    /// `cost` at the prices the file declares (see [`RoleCost::max_cost_declared`]).
    declared: Option<f64>,
    /// The most one try may reply.
    out_per_try: Option<u64>,
    profiles: Vec<String>,
}

fn attempt_cost(
    workflow: &Workflow,
    llm: &crate::compile::LlmRole,
    input_per_try: u64,
    report: &mut CostReport,
) -> Attempt {
    // Under `provider_env` a role of the default profile may call any profile.
    let firsts: Vec<usize> = if llm.default_provider && workflow.default_provider_env.is_some() {
        (0..workflow.providers.len()).collect()
    } else {
        vec![llm.provider]
    };
    let mut a = Attempt {
        input: 0,
        output: Some(0),
        cost: Some(0.0),
        declared: Some(0.0),
        out_per_try: Some(0),
        profiles: Vec::new(),
    };
    for first in firsts {
        let mut chain = Chain {
            input: 0,
            output: Some(0),
            money: Some(0.0),
            at_declared: Some(0.0),
        };
        for id in super::chain(workflow, first) {
            chain.add_profile(workflow, id, input_per_try, &mut a, report);
        }
        a.input = a.input.max(chain.input);
        a.output = max_opt(a.output, chain.output);
        a.cost = max_f64(a.cost, chain.money);
        a.declared = max_f64(a.declared, chain.at_declared);
    }
    a
}

fn max_f64(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a?.max(b?))
}

/// What one attempt spends along one fallback chain.
struct Chain {
    input: u64,
    output: Option<u64>,
    money: Option<f64>,
    at_declared: Option<f64>,
}

impl Chain {
    /// Profile `id` of the chain, tried up to its `retry.max_attempts` times.
    fn add_profile(
        &mut self,
        workflow: &Workflow,
        id: usize,
        input_per_try: u64,
        attempt: &mut Attempt,
        report: &mut CostReport,
    ) {
        let p = &workflow.providers[id];
        let profile = &p.profile;
        if !attempt.profiles.contains(&profile.name) {
            attempt.profiles.push(profile.name.clone());
        }
        let tries = u64::from(profile.retry.max_attempts.max(1));
        let scripted = profile.kind == rondo_provider::ProviderKind::Scripted;
        let out = match (scripted, profile.max_tokens) {
            (true, _) => None,
            (false, Some(m)) => Some(u64::from(m)),
            (false, None) => None,
        };
        attempt.out_per_try = max_opt(attempt.out_per_try, out);
        self.input = self
            .input
            .saturating_add(tries.saturating_mul(input_per_try));
        self.output = mul_opt(
            add_opt(self.output, out.map(|o| o.saturating_mul(tries))),
            Some(1),
        );
        let price = profile.price().unwrap_or_default();
        if profile.priced_by_table() {
            let shown = format!("`{}` ({})", profile.name, profile.model);
            if !report.estimated_prices.contains(&shown) {
                report.estimated_prices.push(shown);
            }
        }
        if profile.priced_by_table() && profile.model_env.is_some() {
            self.money = None;
            report.note(
                Diagnostic::warning(
                    Code::CostUnbounded,
                    format!(
                        "the model of provider `{}`, and so its default price, is read from the environment when a run starts",
                        profile.name
                    ),
                )
                .label(p.span, "`model_env` may name another model")
                .help("write `price { ... }` to have the cost bounded whatever the model"),
            );
            return;
        }
        if profile.price_env.is_some() {
            self.money = None;
            report.note(
                Diagnostic::warning(
                    Code::CostUnbounded,
                    format!(
                        "the prices of provider `{}` are read from the environment when a run starts",
                        profile.name
                    ),
                )
                .label(p.span, "`price_env` sets them")
                .help("a price known only at run time proves nothing: write `price { ... }` without `price_env` to have the cost bounded (the table gives the bound at the prices the file declares)"),
            );
        }
        let input_cost = tin_cost(tries, input_per_try, price.input_per_1k);
        let output_cost = match out {
            Some(o) => Some(tin_cost(tries, o, price.output_per_1k)),
            None if price.output_per_1k == 0.0 => Some(0.0),
            None => None,
        };
        if out.is_none() && !scripted {
            report.note(
                Diagnostic::warning(
                    Code::CostUnbounded,
                    format!(
                        "provider `{}` has no `max_tokens`: its replies have no length bound",
                        profile.name
                    ),
                )
                .label(p.span, "no `max_tokens`")
                .help(format!(
                    "add `max_tokens = 4000` (or the most a reply may need) to provider `{}`",
                    profile.name
                )),
            );
        }
        let both = |acc: Option<f64>| match (acc, output_cost) {
            (Some(m), Some(o)) => Some(m + input_cost + o),
            _ => None,
        };
        self.at_declared = both(self.at_declared);
        self.money = if profile.price_env.is_some() {
            None
        } else {
            both(self.money)
        };
    }
}

fn tin_cost(tries: u64, tokens: u64, per_1k: f64) -> f64 {
    tries as f64 * tokens as f64 / 1000.0 * per_1k
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.saturating_add(b?))
}

fn mul_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.saturating_mul(b?))
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.max(b?))
}

/// A loop of `n` items over a list of `s` bytes, its body measured with an item of 0, `s`
/// and `2s` bytes (`b0`, `b1`, `b2`). With no `min` bound in the body (`convex`) it is convex
/// in its item's size (sums, products and maxima of non-decreasing affine parts, a nested
/// loop's count), so items of sizes x₁..xₙ (Σ ≤ s) cost at most f(s) + (n − 1)·f(0); an
/// affine body is the case the three points show. Otherwise every item may be the whole list.
fn loop_total(n: u64, body: (Option<u64>, Option<u64>, Option<u64>), convex: bool) -> Option<u64> {
    match body {
        (Some(b0), Some(b1), Some(b2))
            if b1 >= b0
                && b2 < u64::MAX
                && (b2.checked_sub(b1) == Some(b1 - b0)
                    || (convex && b2.checked_sub(b1).is_some_and(|d| d >= b1 - b0))) =>
        {
            Some(n.saturating_mul(b0).saturating_add(b1 - b0))
        }
        (_, b1, _) => mul_opt(Some(n), b1),
    }
}

/// The check pass: with `budget` in the header, the proven worst case must be within it.
pub fn check(workflow: &Workflow, diags: &mut Diagnostics) {
    let Some((budget, span)) = workflow.budget else {
        return;
    };
    let report = analyse(workflow);
    let by_inputs = if report.visits_by_inputs.is_empty() {
        String::new()
    } else {
        format!(
            " (visits counted with the default of input {})",
            report.visits_by_inputs.join(", ")
        )
    };
    match report.max_cost {
        Some(cost) if cost <= budget => {}
        Some(cost) => {
            // What stands in for a missing bound may be what puts the run over.
            for w in &report.unbounded {
                diags.push(w.clone());
            }
            diags.push(
                Diagnostic::error(
                    Code::CostOverBudget,
                    format!(
                        "a run can cost up to ${cost:.4}, more than its budget of ${budget:.2}{by_inputs}"
                    ),
                )
                .label(span, format!("budget ${budget:.2}"))
                .help(format!(
                    "the worst case, role by role from `start`: {}; lower `max_visits`, `retries`, `max_tokens` or `max_reply`, bound what the prompts render, or raise the budget (`rondo check --cost` shows the table)",
                    path(workflow, &report)
                )),
            );
        }
        None => {
            let mut d = Diagnostic::error(
                Code::CostUnbounded,
                format!("the cost of a run has no proven bound, so the budget of ${budget:.2} cannot be proven"),
            )
            .label(span, "budget");
            let unbounded: Vec<String> = report
                .roles
                .iter()
                .filter(|r| r.max_cost.is_none())
                .map(|r| format!("`{}`", r.role))
                .collect();
            d = d.help(format!(
                "unbounded: {}; the warnings below say which value has no bound and what to add",
                unbounded.join(", ")
            ));
            diags.push(d);
            for mut w in report.unbounded {
                w.severity = crate::diagnostics::Severity::Error;
                diags.push(w);
            }
        }
    }
}

/// The roles that cost something, in the order a walk from `start` reaches them.
pub fn path(workflow: &Workflow, report: &CostReport) -> String {
    let mut order: Vec<NodeIndex> = Vec::new();
    let mut queue = std::collections::VecDeque::from([workflow.start]);
    let mut seen = std::collections::HashSet::from([workflow.start]);
    while let Some(n) = queue.pop_front() {
        order.push(n);
        for m in workflow
            .graph
            .neighbors_directed(n, petgraph::Direction::Outgoing)
        {
            if seen.insert(m) {
                queue.push_back(m);
            }
        }
    }
    let mut parts = vec!["start".to_string()];
    for n in order {
        let name = &workflow.node(n).name;
        if let Some(r) = report.role(name).filter(|r| r.max_cost != Some(0.0)) {
            parts.push(format!(
                "{} ({} visits × {} attempts, {})",
                r.role,
                CostReport::count(r.visits),
                r.attempts,
                CostReport::money(r.max_cost)
            ));
        }
    }
    parts.join(" → ")
}

/// What a value may hold: its type, and bounds on its compact JSON and on its rendered text.
#[derive(Debug, Clone)]
struct Val {
    ty: Type,
    json: Option<u64>,
    text: Option<u64>,
    /// A list's declared `max_len`.
    len: Option<u64>,
    /// A declared `max_depth` of what it is part of: no part nests deeper.
    depth: Option<u64>,
    /// Part of a whiteboard, code context or history view, whose integers are counts and
    /// line numbers (at most 20 digits), not any whole number.
    counts: bool,
    /// Parsed from at most this many bytes of a tool's output: the value and each of its
    /// parts render to at most [`NUMBER_TEXT_FACTOR`] times that (a number written short
    /// prints every digit; any other byte renders to at most 4), whatever its type.
    parsed_from: Option<u64>,
}

impl Val {
    fn of(ty: Type, json: Option<u64>) -> Val {
        let json = min_opt(json, json_bound(&ty));
        let text = render_bound(&ty, json);
        Val {
            ty,
            json,
            text,
            len: None,
            depth: None,
            counts: false,
            parsed_from: None,
        }
    }

    fn text(len: Option<u64>) -> Val {
        Val {
            ty: Type::String,
            json: len.map(|l| l.saturating_mul(6).saturating_add(2)),
            text: len,
            len: None,
            depth: None,
            counts: false,
            parsed_from: None,
        }
    }

    fn fixed(ty: Type, text: u64) -> Val {
        Val {
            json: json_bound(&ty).or(Some(text.saturating_mul(6).saturating_add(2))),
            ty,
            text: Some(text),
            len: None,
            depth: None,
            counts: false,
            parsed_from: None,
        }
    }

    fn join(a: Val, b: Val) -> Val {
        Val {
            ty: if a.ty == b.ty { a.ty } else { Type::Any },
            json: max_opt(a.json, b.json),
            text: max_opt(a.text, b.text),
            len: max_opt(a.len, b.len),
            depth: max_opt(a.depth, b.depth),
            counts: a.counts && b.counts,
            parsed_from: max_opt(a.parsed_from, b.parsed_from),
        }
    }

    /// An element or field of this value.
    fn part(&self, ty: Type) -> Val {
        let mut v = Val::of(ty, self.json);
        v.depth = self.depth;
        v.counts = self.counts;
        v.parsed_from = self.parsed_from;
        v.cap_parsed();
        if self.counts && matches!(v.ty.strip_optional(), Type::Int) {
            v.text = Some(INT_TEXT);
        }
        v
    }

    /// One item of this list (or value of this map): its own type's bound when it has one,
    /// else the whole's JSON less the brackets around it (a list may hold a single item).
    fn element(&self) -> Val {
        let inner = Val {
            json: self.json.map(|j| j.saturating_sub(2)),
            ..self.clone()
        };
        inner.part(element(&self.ty))
    }

    /// Its text cut to what the bytes it was parsed from render to (a `min`: counted).
    fn cap_parsed(&mut self) {
        if let Some(cap) = self
            .parsed_from
            .map(|n| n.saturating_mul(NUMBER_TEXT_FACTOR))
            && self.text.is_none_or(|t| t > cap)
        {
            capped_once();
            self.text = Some(cap);
        }
    }

    /// How many items a loop over it makes.
    fn items(&self) -> Option<u64> {
        // Each item takes at least the least JSON of its type and a separator (a map's
        // entry its key, `""`, and `:` too).
        let per = match self.ty.strip_optional() {
            Type::Map { value } => min_json(value) + 4,
            other => min_json(&element(other)) + 1,
        };
        min_opt(
            self.json.map(|j| j.saturating_sub(2) / per.max(1) + 1),
            self.len,
        )
    }
}

thread_local! {
    /// How many times a `min` bound took the smaller side: a body that took one may be
    /// concave in its item's size, and the convex rule of a loop does not hold for it.
    static CAPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn capped_once() {
    CAPS.with(|c| c.set(c.get() + 1));
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The most bytes any value of `ty` serializes to, when its type alone bounds it.
fn json_bound(ty: &Type) -> Option<u64> {
    match ty {
        Type::Int | Type::Float => Some(24),
        Type::Bool => Some(5),
        Type::Null => Some(4),
        Type::Literal { value } => Some(serde_json::to_string(value).map_or(0, |s| s.len()) as u64),
        Type::Union { members } => members
            .iter()
            .map(json_bound)
            .try_fold(0u64, |m, b| Some(m.max(b?))),
        Type::Optional { inner } => json_bound(inner).map(|b| b.max(4)),
        Type::Object { fields, .. } => fields.iter().try_fold(2u64, |sum, f| {
            let key = serde_json::to_string(&f.name).map_or(0, |s| s.len()) as u64;
            Some(sum + key + 2 + json_bound(&f.ty)?)
        }),
        _ => None,
    }
}

/// The most bytes a value of `ty` renders to in `{{ }}`, given a bound on its JSON.
fn render_bound(ty: &Type, json: Option<u64>) -> Option<u64> {
    let fixed = match ty {
        // An `int` is any whole number, `1e300` too, which prints every digit.
        Type::Int | Type::Float => Some(FLOAT_TEXT),
        Type::Bool => Some(5),
        Type::Null => Some(0),
        Type::Literal { value } => Some(value.len() as u64),
        // tera renders an object as `[object]`.
        Type::Object { .. } => Some(8),
        Type::Union { members } => members
            .iter()
            .map(|m| render_bound(m, None))
            .try_fold(0u64, |m, b| Some(m.max(b?))),
        Type::Optional { inner } => render_bound(inner, None),
        _ => None,
    };
    fixed.or_else(|| json.map(|j| j.saturating_mul(render_factor(ty))))
}

/// Rendered text per JSON byte: a string's text is no longer than its JSON; a list adds a
/// space per separator and an object inside one is `[object]` (2 bytes of JSON at least);
/// a number prints every digit, 62 times its JSON at most (`1e308`, 5 bytes, prints 309;
/// `5e-324`, 6 bytes, 326).
fn render_factor(ty: &Type) -> u64 {
    if has_float(ty) {
        NUMBER_TEXT_FACTOR
    } else if matches!(ty.strip_optional(), Type::String | Type::WorkspacePath) {
        1
    } else {
        4
    }
}

/// The fewest bytes of JSON a value of `ty` takes (an optional field may be absent).
fn min_json(ty: &Type) -> u64 {
    match ty {
        Type::Int | Type::Float | Type::Any => 1,
        Type::Bool | Type::Null => 4,
        Type::Literal { value } => serde_json::to_string(value).map_or(2, |s| s.len()) as u64,
        Type::Optional { inner } => min_json(inner).min(4),
        Type::Union { members } => members.iter().map(min_json).min().unwrap_or(1),
        Type::Object { fields, .. } => {
            let required: Vec<_> = fields.iter().filter(|f| !f.ty.is_optional()).collect();
            let each: u64 = required
                .iter()
                .map(|f| {
                    serde_json::to_string(&f.name).map_or(2, |s| s.len()) as u64
                        + 1
                        + min_json(&f.ty)
                })
                .sum();
            2 + required.len().saturating_sub(1) as u64 + each
        }
        // A string, a list, a map: `""`, `[]`, `{}`.
        _ => 2,
    }
}

fn has_float(ty: &Type) -> bool {
    match ty {
        Type::Int | Type::Float | Type::Any => true,
        Type::List { item } => has_float(item),
        Type::Map { value } => has_float(value),
        Type::Object { fields, .. } => fields.iter().any(|f| has_float(&f.ty)),
        Type::Union { members } => members.iter().any(has_float),
        Type::Optional { inner } => has_float(inner),
        _ => false,
    }
}

/// How deep a value of `ty` nests; `None` for `any`, which updates can nest without end.
fn depth(ty: &Type) -> Option<u64> {
    Some(match ty {
        Type::Any => return None,
        Type::List { item } => 1 + depth(item)?,
        Type::Map { value } => 1 + depth(value)?,
        Type::Object { fields, .. } => {
            1 + fields
                .iter()
                .map(|f| depth(&f.ty))
                .try_fold(0u64, |m, d| Some(m.max(d?)))?
        }
        Type::Union { members } => members
            .iter()
            .map(depth)
            .try_fold(0u64, |m, d| Some(m.max(d?)))?,
        Type::Optional { inner } => depth(inner)?,
        _ => 0,
    })
}

fn element(ty: &Type) -> Type {
    match ty.strip_optional() {
        Type::List { item } => (**item).clone(),
        Type::Map { value } => (**value).clone(),
        Type::String => Type::String,
        _ => Type::Any,
    }
}

/// Walks one role's templates with the bound of every variable.
struct Walker<'a> {
    workflow: &'a Workflow,
    prompts: &'a Prompts,
    node: NodeIndex,
    frames: Vec<HashMap<String, Val>>,
    found: Vec<Diagnostic>,
    file: String,
}

impl<'a> Walker<'a> {
    fn new(workflow: &'a Workflow, prompts: &'a Prompts, node: NodeIndex) -> Self {
        Walker {
            workflow,
            prompts,
            node,
            frames: vec![HashMap::new()],
            found: Vec::new(),
            file: String::new(),
        }
    }

    fn template(&mut self, name: &str, depth: usize) -> Val {
        let Ok(template) = self.prompts.tera.get_template(name) else {
            return Val::text(None);
        };
        if depth > MAX_DEPTH {
            return Val::text(None);
        }
        let outer = std::mem::replace(&mut self.file, name.to_string());
        let text = self.nodes(&template.ast, depth);
        self.file = outer;
        Val::text(text)
    }

    fn nodes(&mut self, nodes: &[Node], depth: usize) -> Option<u64> {
        let mut total: Option<u64> = Some(0);
        for node in nodes {
            total = add_opt(total, self.node(node, depth));
        }
        total
    }

    fn node(&mut self, node: &Node, depth: usize) -> Option<u64> {
        match node {
            Node::Text(t) | Node::Raw(_, t, _) => Some(t.len() as u64),
            Node::Comment(..)
            | Node::Break(_)
            | Node::Continue(_)
            | Node::MacroDefinition(..)
            | Node::ImportMacro(..) => Some(0),
            Node::VariableBlock(_, e) => self.variable_block(e),
            Node::Set(_, set) => self.set(set),
            Node::Include(_, names, _) => {
                let mut out: Option<u64> = Some(0);
                for n in names {
                    out = max_opt(out, self.template(n, depth + 1).text);
                }
                out
            }
            Node::Block(_, block, _) => self.nodes(&block.body, depth + 1),
            Node::FilterSection(_, section, _) => {
                let body = self.nodes(&section.body, depth + 1);
                self.filter(Val::text(body), &section.filter).text
            }
            Node::If(i, _) => {
                let mut out: Option<u64> = Some(0);
                // No scope of its own: tera keeps what a branch sets.
                for (_, _, body) in &i.conditions {
                    out = max_opt(out, self.nodes(body, depth + 1));
                }
                if let Some((_, body)) = &i.otherwise {
                    out = max_opt(out, self.nodes(body, depth + 1));
                }
                out
            }
            Node::Forloop(_, l, _) => self.for_loop(l, depth),
            Node::Extends(..) | Node::Super => {
                self.unbounded(
                    "extends",
                    "a template that extends another is not measured".into(),
                    "include the parts instead (`{% include \"part.tera\" %}`)".into(),
                );
                None
            }
        }
    }

    /// `{{ e }}`: what it renders, and a warning when that has no bound.
    fn variable_block(&mut self, e: &Expr) -> Option<u64> {
        let before = self.found.len();
        let text = self.expr(e).text;
        // Whatever has no bound says so: here, if nothing it reads did.
        if text.is_none() && self.found.len() == before {
            let what = match &e.val {
                ExprVal::Ident(id) => id.clone(),
                _ => "this value".to_string(),
            };
            self.unbounded(
                &what,
                format!("what `{what}` renders has no bound"),
                "render a bounded value, or cut it with `truncate(length=N)`".into(),
            );
        }
        text
    }

    /// `{% set %}`: renders nothing; the name holds the value's bound from here on.
    fn set(&mut self, set: &tera::ast::Set) -> Option<u64> {
        let mut v = self.expr(&set.value);
        // A global set inside a loop may grow with each pass.
        if set.global && self.frames.len() > 1 {
            v = Val::of(v.ty, None);
            v.text = None;
            self.unbounded(
                &set.key,
                "set_global inside a loop may grow with each pass".into(),
                "build the text from a bounded list instead".into(),
            );
        }
        let frame = if set.global {
            self.frames.first_mut()
        } else {
            self.frames.last_mut()
        };
        // Joined with what it held: a `set` in one branch of an `if` outlives the
        // branch, and an over-estimate stays sound.
        if let Some(f) = frame {
            let v = match f.remove(&set.key) {
                Some(old) => Val::join(old, v),
                None => v,
            };
            f.insert(set.key.clone(), v);
        }
        Some(0)
    }

    /// `{% for %}`: its body per item (items share the list's bytes), or its `else`.
    fn for_loop(&mut self, l: &tera::ast::Forloop, depth: usize) -> Option<u64> {
        let over = self.expr(&l.container);
        let items = if matches!(over.ty.strip_optional(), Type::String) {
            over.text
        } else {
            over.items()
        };
        let empty = match &l.empty_body {
            Some(body) => self.nodes(body, depth + 1),
            None => Some(0),
        };
        let whole = over.json;
        let body = match (items, whole) {
            (Some(n), Some(s)) => {
                // Items share the list's bytes: a body that grows with its item by the same
                // amount per byte costs its fixed part per item plus that rate times the
                // list's size.
                let s2 = s.max(1).saturating_mul(2);
                let s = s2 / 2;
                let caps = CAPS.with(std::cell::Cell::get);
                let b0 = self.loop_body(l, &over, Some(0), depth);
                let b1 = self.loop_body(l, &over, Some(s), depth);
                let b2 = self.loop_body(l, &over, Some(s2), depth);
                let convex = CAPS.with(std::cell::Cell::get) == caps;
                loop_total(n, (b0, b1, b2), convex)
            }
            (Some(n), None) => mul_opt(Some(n), self.loop_body(l, &over, None, depth)),
            (None, _) => {
                self.loop_body(l, &over, whole, depth);
                None
            }
        };
        max_opt(body, empty)
    }

    /// The loop's body once, its item's JSON at most `json` bytes.
    fn loop_body(
        &mut self,
        l: &tera::ast::Forloop,
        over: &Val,
        json: Option<u64>,
        depth: usize,
    ) -> Option<u64> {
        let item_ty = element(&over.ty);
        let mut frame = HashMap::new();
        let mut item = over.part(item_ty.clone());
        item = Val {
            json: min_opt(json, Val::of(item_ty.clone(), json).json),
            text: Val::of(item_ty.clone(), json).text,
            ..item
        };
        if item.counts && matches!(item.ty.strip_optional(), Type::Int) {
            item.text = Some(INT_TEXT);
        }
        item.cap_parsed();
        frame.insert(l.value.clone(), item);
        if let Some(k) = &l.key {
            frame.insert(k.clone(), Val::of(Type::String, json));
        }
        let lp = Type::object(vec![
            ("index", Type::Int),
            ("index0", Type::Int),
            ("first", Type::Bool),
            ("last", Type::Bool),
        ]);
        frame.insert("loop".into(), Val::of(lp, None));
        self.frames.push(frame);
        let b = self.nodes(&l.body, depth + 1);
        self.frames.pop();
        b
    }

    fn expr(&mut self, e: &Expr) -> Val {
        let mut v = if e.negated {
            Val::fixed(Type::Bool, 5)
        } else {
            self.expr_val(&e.val)
        };
        let mut filters = e.filters.iter().peekable();
        // `default` applies only to what is undefined: a field a declaration always has is not.
        if let (ExprVal::Ident(id), Some(f)) = (&e.val, filters.peek())
            && f.name == "default"
            && !e.negated
            && self.always_defined(id)
        {
            filters.next();
        }
        for f in filters {
            v = self.filter(v, f);
        }
        v
    }

    /// `memory.NAME.field...` or `input.NAME.field...` through required fields of the
    /// declared type (or of a structured memory's view): defined in every run.
    fn always_defined(&self, ident: &str) -> bool {
        let parts = split_ident(ident);
        if self.lookup(parts[0].as_deref().unwrap_or("")).is_some() {
            return false;
        }
        let mut ty = match (parts[0].as_deref(), parts.get(1).and_then(|p| p.as_deref())) {
            (Some("memory"), Some(name)) => {
                match self.workflow.memory.iter().find(|m| m.name == name) {
                    Some(slot) => slot.kind.view_type(),
                    None => return false,
                }
            }
            (Some("input"), Some(name)) => {
                match self.workflow.inputs.iter().find(|i| i.name == name) {
                    Some(i) if i.default.is_some() => i.ty.clone(),
                    _ => return false,
                }
            }
            _ => return false,
        };
        for p in &parts[2..] {
            let Some(field) = p else { return false };
            let Type::Object { fields, .. } = &ty else {
                return false;
            };
            match fields.iter().find(|f| &f.name == field) {
                Some(f) if !f.ty.is_optional() => ty = f.ty.clone(),
                _ => return false,
            }
        }
        !ty.is_optional()
    }

    fn expr_val(&mut self, v: &ExprVal) -> Val {
        match v {
            ExprVal::String(s) => Val::fixed(Type::String, s.len() as u64),
            ExprVal::Int(_) => Val::fixed(Type::Int, INT_TEXT),
            ExprVal::Float(_) => Val::fixed(Type::Float, FLOAT_TEXT),
            ExprVal::Bool(_) => Val::fixed(Type::Bool, 5),
            ExprVal::Math(_) => Val::fixed(Type::Float, FLOAT_TEXT),
            ExprVal::Logic(_) | ExprVal::Test(_) | ExprVal::In(_) => Val::fixed(Type::Bool, 5),
            ExprVal::Ident(id) => self.ident(id),
            ExprVal::Array(items) => {
                let mut json: Option<u64> = Some(2);
                let mut ty = None;
                for i in items {
                    let v = self.expr(i);
                    json = add_opt(json, v.json.map(|j| j + 1));
                    ty = Some(match ty {
                        None => v.ty,
                        Some(t) if t == v.ty => t,
                        Some(_) => Type::Any,
                    });
                }
                Val::of(Type::list(ty.unwrap_or(Type::Any)), json)
            }
            ExprVal::StringConcat(c) => {
                let mut text: Option<u64> = Some(0);
                for part in &c.values {
                    text = add_opt(text, self.expr_val(part).text);
                }
                Val::text(text)
            }
            ExprVal::FunctionCall(f) => match f.name.as_str() {
                "range" => Val::of(
                    Type::list(Type::Int),
                    Some(MAX_RANGE as u64 * (INT_TEXT + 1) + 2),
                ),
                "throw" => Val::text(Some(0)),
                _ => {
                    self.unbounded(
                        &f.name,
                        format!("what `{}(...)` returns has no bound", f.name),
                        "render a bounded value instead".into(),
                    );
                    Val::text(None)
                }
            },
            ExprVal::MacroCall(m) => {
                self.unbounded(
                    &m.name,
                    format!("what macro `{}` renders is not measured", m.name),
                    "use `{% include %}` for a shared part".into(),
                );
                Val::text(None)
            }
        }
    }

    fn filter(&mut self, v: Val, f: &FunctionCall) -> Val {
        // A type with a fixed bound caps its JSON (a `min`): what a filter makes of that JSON
        // may not grow with the item the way a loop's convex rule needs.
        if json_bound(&v.ty).is_some() {
            capped_once();
        }
        if let Some(out) = text_filter(&v, f) {
            return out;
        }
        match f.name.as_str() {
            "replace" => match (lit_str(f, "from"), lit_str(f, "to")) {
                (Some(from), Some(to)) if from > 0 => Val::text(
                    v.text
                        .map(|t| t.saturating_add((t / from).saturating_mul(to))),
                ),
                _ => {
                    self.unbounded(
                        "replace",
                        "`replace` with arguments that are not literals".into(),
                        "write `from` and `to` as strings".into(),
                    );
                    Val::text(None)
                }
            },
            "json_encode" | "to_json" => json_encode(&v, f),
            "first" | "last" | "nth" | "get" => v.element(),
            "sort" | "unique" | "reverse" | "slice" | "filter" => v,
            "map" | "group_by" => Val::of(Type::Any, v.json.map(|j| j.saturating_mul(2))),
            "concat" => {
                let with = f.args.get("with").map(|e| self.expr(e));
                let json = add_opt(v.json, with.and_then(|w| w.json));
                Val::of(v.ty.clone(), json)
            }
            "split" => split(&v, f),
            "join" => Val::text(join(&v, lit_str(f, "sep").unwrap_or(0))),
            "default" => match f.args.get("value") {
                Some(d) => {
                    let d = self.expr(d);
                    Val::join(v, d)
                }
                None => v,
            },
            other => {
                self.unbounded(
                    other,
                    format!("what filter `{other}` renders is not measured"),
                    "render the value without it, or cut it with `truncate(length=N)`".into(),
                );
                Val::text(None)
            }
        }
    }

    fn lookup(&self, name: &str) -> Option<Val> {
        self.frames.iter().rev().find_map(|f| f.get(name).cloned())
    }

    /// `root.field[0].other`: the root's bound narrowed by each step's type.
    fn ident(&mut self, ident: &str) -> Val {
        let mut parts = split_ident(ident).into_iter();
        let root = parts.next().flatten().unwrap_or_default();
        let in_loop = root == "loop" && self.lookup(&root).is_some();
        let mut v = match self.lookup(&root) {
            Some(v) => v,
            None => self.root(&root, &mut parts),
        };
        for (i, p) in parts.enumerate() {
            // A loop's counter is below the items' count: a whole number of 20 digits.
            if in_loop && i == 0 && matches!(p.as_deref(), Some("index" | "index0")) {
                v = Val::fixed(Type::Int, INT_TEXT);
                continue;
            }
            let ty = match &p {
                Some(field) => match v.ty.strip_optional() {
                    Type::Map { value } => (**value).clone(),
                    other => other.field(field).unwrap_or(Type::Any),
                },
                None => element(&v.ty),
            };
            v = v.part(ty);
        }
        v
    }

    /// A global of the template's context. May take the first field (`input.x`,
    /// `memory.y`), whose declaration knows the bound.
    fn root(&mut self, root: &str, parts: &mut std::vec::IntoIter<Option<String>>) -> Val {
        let workflow = self.workflow;
        match root {
            "round" | "step" | "visit" => Val::fixed(Type::Int, INT_TEXT),
            "run_id" => Val::fixed(Type::String, RUN_ID_TEXT),
            "role" => Val::fixed(Type::String, workflow.node(self.node).name.len() as u64),
            "last_error" => Val::of(Type::optional(Type::String), Some(MAX_LAST_ERROR * 6 + 2))
                .with_text(Some(MAX_LAST_ERROR + 3)),
            "tools" => {
                let bytes: u64 = match workflow.role(self.node).map(|r| &r.kind) {
                    Some(RoleKind::Llm(l)) => l
                        .tools
                        .iter()
                        .filter_map(|&t| workflow.tools.get(t))
                        .map(|t| {
                            serde_json::json!({"name": t.name(), "usage": t.spec.usage, "executable": t.spec.executable, "input_schema": t.input_schema()})
                                .to_string()
                                .len() as u64
                                + t.name().len() as u64
                                + 4
                        })
                        .sum(),
                    _ => 0,
                };
                Val::of(Type::Any, Some(bytes + 2))
            }
            "demos" => match workflow.role(self.node).map(|r| &r.kind) {
                Some(RoleKind::Llm(l)) if l.demos.is_some() => {
                    self.unbounded(
                        "demos",
                        "the demos file is read when a run starts".into(),
                        "render a fixed number of demos with `demos | slice(end=N)` and cut each with `truncate`".into(),
                    );
                    Val::of(Type::Any, None)
                }
                _ => Val::of(Type::list(Type::Any), Some(2)),
            },
            "input" => match parts.next() {
                Some(Some(name)) => self.input(&name),
                _ => {
                    let mut sum = Some(2u64);
                    for i in &workflow.inputs {
                        sum = add_opt(
                            sum,
                            self.input(&i.name)
                                .json
                                .map(|j| j + i.name.len() as u64 + 4),
                        );
                    }
                    Val::of(Type::Any, sum)
                }
            },
            "memory" => match parts.next() {
                Some(Some(name)) => self.memory(&name),
                _ => Val::of(Type::Any, None),
            },
            "item" => self.item(),
            name => match workflow
                .find_node(name)
                .and_then(|n| Some((n, workflow.role(n)?)))
            {
                Some((n, role)) => match (&role.kind, parts.clone().next()) {
                    (RoleKind::Tool(t), Some(Some(field)))
                        if !workflow.map_workers().contains(&n) =>
                    {
                        match tool_field(workflow, t, role, &field) {
                            Some(v) => {
                                parts.next();
                                v
                            }
                            None => self.output(n, role),
                        }
                    }
                    _ => self.output(n, role),
                },
                None => Val::of(Type::Any, None),
            },
        }
    }

    fn input(&mut self, name: &str) -> Val {
        let workflow = self.workflow;
        let Some(input) = workflow.inputs.iter().find(|i| i.name == name) else {
            return Val::of(Type::Any, None);
        };
        let limit = min_opt(
            input.bound.max_bytes,
            workflow.limits.max_input_bytes.map(|(n, _)| n),
        );
        let mut v = Val::of(input.ty.clone(), limit);
        v.len = input.bound.max_len;
        v.depth = input.bound.max_depth;
        if v.json.is_none() {
            self.unbounded_at(
                input.span,
                format!("input `{name}`"),
                format!("input `{name}` has no size bound"),
                "any length a run is given".into(),
                format!("bound it: `limits {{ max_bytes = {{ {name}: \"16KB\" }} }}` in the workflow header, or every input with `max_input_bytes = \"16KB\"` (a run given more does not start)"),
            );
        }
        v
    }

    fn memory(&mut self, name: &str) -> Val {
        let workflow = self.workflow;
        let Some(slot) = workflow.memory.iter().find(|m| m.name == name) else {
            return Val::of(Type::Any, None);
        };
        match &slot.kind {
            MemoryKind::Value { ty, default } => {
                // An initial value past `max_memory_bytes` stays until an update replaces
                // it; the slot's own bound holds its initial value (`check` says so).
                let start = default.to_string().len() as u64;
                let global = workflow.limits.max_memory_bytes.map(|(n, _)| n.max(start));
                let mut v = Val::of(ty.clone(), min_opt(slot.bound.max_bytes, global));
                v.len = slot.bound.max_len;
                v.depth = slot.bound.max_depth;
                if v.json.is_none() {
                    self.unbounded_at(
                        slot.span,
                        format!("memory `{name}`"),
                        format!("memory `{name}` has no size bound"),
                        "grows with every update".into(),
                        format!("bound it: `limits {{ max_bytes = {{ {name}: \"64KB\" }} }}` in the workflow header (a list may also take `max_len = {{ {name}: 20 }}`), or every value memory with `max_memory_bytes = \"64KB\"`; a step that would store more ends the run at `limit`"),
                    );
                }
                v
            }
            MemoryKind::Conversation {
                max_messages,
                max_bytes,
            } => {
                Val::of(
                    Type::list(Type::Any),
                    Some(max_bytes.saturating_mul(6).saturating_add(
                        max_messages.saturating_mul(CONVERSATION_MESSAGE_EXTRA * 2),
                    )),
                )
            }
            other => match slot.bound.max_bytes {
                // What a template sees is cut to it (`rondo_memory::fit_json`).
                Some(max) => {
                    let mut v = Val::of(other.view_type(), Some(max));
                    v.counts = true;
                    v
                }
                None => {
                    let kind = other.kind_name();
                    self.unbounded_at(
                        slot.span,
                        format!("memory `{name}`"),
                        format!("memory `{name}` ({kind}) has no size bound"),
                        format!("a {kind} grows with the run"),
                        format!("add `max_bytes = \"32KB\"` to its declaration: `{name}: {kind} {{ ...  max_bytes = \"32KB\" }}` (what a template sees of it is cut to that, oldest items first)"),
                    );
                    Val::of(other.view_type(), None)
                }
            },
        }
    }

    /// `item` of a map worker: an element of the list the map goes over.
    fn item(&mut self) -> Val {
        let workflow = self.workflow;
        for route in &workflow.routes {
            if let RouteTarget::Map { worker, over, .. } = &route.target
                && *worker == self.node
            {
                if let crate::compile::ExprKind::Path { root, fields } = &over.kind
                    && let crate::compile::Root::Memory { id } = root
                    && let Some(slot) = workflow.memory.get(*id)
                {
                    let list = self.memory(&slot.name);
                    let mut ty = list.ty.clone();
                    for f in fields {
                        ty = ty.field(f).unwrap_or(Type::Any);
                    }
                    return list.part(element(&ty));
                }
                self.unbounded_at(
                    over.span,
                    "item".into(),
                    "the items of this map have no size bound".into(),
                    "what `item` is".into(),
                    "map over a memory bounded by `limits { max_bytes = { NAME: \"64KB\" } }`"
                        .into(),
                );
                return Val::of(Type::Any, None);
            }
        }
        Val::of(Type::Any, None)
    }

    /// A role's latest output.
    fn output(&mut self, n: NodeIndex, role: &crate::compile::Role) -> Val {
        let workflow = self.workflow;
        if workflow.map_workers().contains(&n) {
            self.unbounded_at(
                workflow.node(n).span,
                format!("`{}`", workflow.node(n).name),
                format!("the outputs of map worker `{}` have no count bound", workflow.node(n).name),
                "read by name: the list of its branch outputs".into(),
                "store what the prompt needs in a memory bounded by `limits { max_bytes = { NAME: \"64KB\" } }`".into(),
            );
            return Val::of(Type::Any, None);
        }
        let ty = (*role.output_type).clone();
        match &role.kind {
            RoleKind::Llm(l) => {
                let reply = l.max_reply.unwrap_or(DEFAULT_MAX_REPLY);
                match &l.output {
                    // The text as it came (or cut, with a note).
                    OutputFormat::Text | OutputFormat::Code { .. } if !l.mode.native() => {
                        Val::text(Some(reply.saturating_add(256)))
                    }
                    // Parsed from at most `max_reply` bytes: a number's JSON may be 4.5
                    // times its text (`1e15`), an escaped character 6.
                    _ => Val::of(ty, Some(reply.saturating_mul(6).saturating_add(256))),
                }
            }
            RoleKind::Tool(_) => {
                let v = Val::of(ty, None);
                v.with_missing(self, workflow.node(n).span, &workflow.node(n).name)
            }
            RoleKind::Builtin => Val::of(Type::Null, Some(4)),
        }
    }

    fn unbounded(&mut self, what: &str, message: String, help: String) {
        let span = self.workflow.node(self.node).span;
        let role = self.workflow.node(self.node).name.clone();
        let d = Diagnostic::warning(
            Code::CostUnbounded,
            format!(
                "`{}` renders something without a size bound: {message}",
                self.file
            ),
        )
        .label(span, format!("role `{role}` renders it"))
        .help(help);
        let d = self.in_template(d, what);
        self.found.push(d);
    }

    fn unbounded_at(
        &mut self,
        at: Span,
        what: String,
        message: String,
        label: String,
        help: String,
    ) {
        let d = Diagnostic::warning(
            Code::CostUnbounded,
            format!("{message}, and `{}` renders it", self.file),
        )
        .label(at, label)
        .help(help);
        let needle = what
            .trim_matches('`')
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .trim_matches('`')
            .to_string();
        let d = self.in_template(d, &needle);
        self.found.push(d);
    }

    /// Points the diagnostic at the first use of `what` in the template being walked.
    fn in_template(&self, d: Diagnostic, what: &str) -> Diagnostic {
        let Some(text) = self.prompts.sources.get(&self.file) else {
            return d;
        };
        let at = text.find(what).unwrap_or(0);
        let span = Span::new(
            at,
            at + if text.find(what).is_some() {
                what.len()
            } else {
                0
            },
        );
        d.external(ExternalLabel::new(
            &self.prompts.dir.join(&self.file),
            Arc::clone(text),
            span,
            "rendered here",
        ))
    }
}

impl Val {
    fn with_text(mut self, text: Option<u64>) -> Val {
        self.text = text;
        self
    }

    /// A tool output: only what its type bounds (an exit code, a flag) has a bound.
    fn with_missing(self, w: &mut Walker, span: Span, role: &str) -> Val {
        if self.json.is_none() {
            w.unbounded_at(
                span,
                format!("`{role}`"),
                format!("the whole result of tool role `{role}` has no size bound"),
                "what the tool prints".into(),
                "render its fields, which its `max_output` bounds (`stdout`, `stderr`, `shown`, `data`, `ok`, `exit_code`), not the whole result (its `args` have no bound)".into(),
            );
        }
        self
    }
}

/// A filter's argument written as a whole number.
fn lit_u64(f: &FunctionCall, name: &str) -> Option<u64> {
    match f.args.get(name).map(|e| &e.val) {
        Some(ExprVal::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The length of a filter's argument written as a string.
fn lit_str(f: &FunctionCall, name: &str) -> Option<u64> {
    match f.args.get(name).map(|e| &e.val) {
        Some(ExprVal::String(s)) => Some(s.len() as u64),
        _ => None,
    }
}

/// The filters whose result is text (or a number) bounded by the text they are given.
fn text_filter(v: &Val, f: &FunctionCall) -> Option<Val> {
    let t = v.text;
    let scale = |k: u64| t.map(|t| t.saturating_mul(k));
    Some(match f.name.as_str() {
        "safe" | "as_str" | "trim" | "trim_start" | "trim_end" | "trim_start_matches"
        | "trim_end_matches" | "striptags" | "spaceless" => Val::text(t),
        // Case mapping may triple a character's bytes (`ΐ` → `Ϊ́`).
        "upper" | "lower" | "capitalize" | "title" => Val::text(scale(3)),
        "escape" | "escape_xml" => Val::text(scale(6)),
        "addslashes" => Val::text(scale(2)),
        "linebreaksbr" => Val::text(scale(5)),
        "length" | "wordcount" | "int" => Val::fixed(Type::Int, INT_TEXT),
        "float" | "abs" | "round" => Val::fixed(Type::Float, FLOAT_TEXT),
        "pluralize" => Val::text(Some(lit_str(f, "plural").unwrap_or(1).max(8))),
        "truncate" => match lit_u64(f, "length") {
            Some(n) => {
                if t.is_none_or(|t| t > n * 4) {
                    capped_once();
                }
                Val::text(min_opt(t.map(|t| t + 3), Some(n * 4 + 3)))
            }
            None => Val::text(t.map(|t| t + 3)),
        },
        "pad" => Val::text(add_opt(
            max_opt(t, v.json),
            Some(lit_u64(f, "width").unwrap_or(MAX_PAD_WIDTH as u64)),
        )),
        "indent" => {
            let width = lit_u64(f, "width").unwrap_or(4);
            Val::text(t.map(|t| t.saturating_add((t + 1).saturating_mul(width))))
        }
        _ => return None,
    })
}

/// `json_encode` / `to_json`: the value's JSON; pretty, a line per value, indented two
/// spaces a level (a value nests at most one level per two bytes of its JSON).
fn json_encode(v: &Val, f: &FunctionCall) -> Val {
    let pretty = f.name == "to_json"
        || matches!(
            f.args.get("pretty").map(|e| &e.val),
            Some(ExprVal::Bool(true))
        );
    let json = if pretty {
        v.json.map(|j| {
            let d = min_opt(depth(&v.ty), v.depth).unwrap_or(j / 2 + 1);
            j.saturating_mul(d.saturating_mul(2).saturating_add(3))
        })
    } else {
        v.json
    };
    Val::text(json)
}

/// `split(pat=...)`: a text of t bytes is cut into at most t / |pat| + 1 pieces (t + 2 for an
/// empty pattern: every character and the two ends), each written as JSON at most 6 times
/// its bytes, with its quotes and a comma.
fn split(v: &Val, f: &FunctionCall) -> Val {
    let mut out = Val::of(
        Type::list(Type::String),
        v.text.map(|t| t.saturating_mul(9).saturating_add(7)),
    );
    if let (Some(t), Some(pat)) = (v.text, lit_str(f, "pat")) {
        out.len = Some(t / pat.max(1) + 2);
    }
    out
}

/// `join(sep=...)`: every item's text and a separator after each, at most.
fn join(v: &Val, sep: u64) -> Option<u64> {
    let items = v.items();
    let each = v.part(element(&v.ty)).text;
    let (Some(s), Some(n)) = (v.json, items) else {
        return None;
    };
    let per_byte =
        render_factor(&element(&v.ty)).max(render_bound(&element(&v.ty), Some(1)).unwrap_or(1));
    let numbers = if has_float(&element(&v.ty)) {
        FLOAT_TEXT
    } else {
        0
    };
    let x = s
        .saturating_mul(per_byte)
        .saturating_add(n.saturating_mul(sep + numbers));
    Some(match each {
        Some(e) => {
            let y = n.saturating_mul(e + sep);
            if y < x {
                capped_once();
            }
            x.min(y)
        }
        None => x,
    })
}

/// Bytes a tool's captured stream holds besides its kept head and tail: the cut's marker
/// line, a timeout's note, the verdict line of `show`.
const TOOL_STREAM_EXTRA: u64 = 512;

/// The most bytes a tool role keeps of each stream: its `max_output`, else its tool's (the
/// largest of the tools it may choose), else the engine's default. The run enforces it.
pub fn tool_max_output(workflow: &Workflow, role: &crate::compile::ToolRole) -> u64 {
    use crate::compile::ToolAction;
    let default = rondo_env::DEFAULT_MAX_OUTPUT as u64;
    if let Some(m) = role.max_output {
        return m;
    }
    let spec = |t: usize| workflow.tools[t].spec.max_output.unwrap_or(default);
    match &role.action {
        ToolAction::Command { .. } => default,
        ToolAction::Tool { tool, .. } => spec(*tool),
        ToolAction::Choose { choices, .. } | ToolAction::Calls { choices, .. } => {
            choices.iter().map(|&t| spec(t)).max().unwrap_or(default)
        }
    }
}

/// A field of a tool role's result that its `max_output` bounds: the streams as text (an
/// invalid byte may read as a 3-byte `�`), and what was parsed from stdout. `None`: a field
/// it does not bound (`args`: what the role was given).
fn tool_field(
    workflow: &Workflow,
    tool: &crate::compile::ToolRole,
    role: &crate::compile::Role,
    field: &str,
) -> Option<Val> {
    if matches!(tool.action, crate::compile::ToolAction::Calls { .. }) {
        return None;
    }
    let kept = tool_max_output(workflow, tool).saturating_add(TOOL_STREAM_EXTRA);
    let text = kept.saturating_mul(3);
    let ty = role.output_type.field(field).unwrap_or(Type::Any);
    Some(match field {
        "stdout" | "stderr" | "shown" => Val {
            ty: Type::String,
            json: Some(kept.saturating_mul(6).saturating_add(2)),
            text: Some(text),
            len: None,
            depth: None,
            counts: false,
            parsed_from: None,
        },
        // Parsed from the kept bytes: a number written short may take 4.5 times its text
        // (`1e15`), a `�` stays 3 bytes.
        "data" | "warnings" | "error" | "status" => {
            let mut v = Val::of(ty, Some(kept.saturating_mul(5).saturating_add(text)));
            v.parsed_from = Some(kept);
            v.cap_parsed();
            v
        }
        "tool_name" => Val::fixed(Type::String, 256),
        "log" => Val::fixed(Type::optional(Type::String), 4096),
        "ok" | "timed_out" => Val::fixed(Type::Bool, 5),
        "exit_code" | "execution_time" => Val::fixed(ty, FLOAT_TEXT),
        "error_kind" => Val::fixed(ty, 16),
        _ => return None,
    })
}

/// `a.b[0]["c"]` as `a`, then `Some("b")`, `None` (an index), `Some("c")`.
fn split_ident(ident: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut rest = ident;
    let root_end = rest.find(['.', '[']).unwrap_or(rest.len());
    out.push(Some(rest[..root_end].to_string()));
    rest = &rest[root_end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            out.push(Some(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            let key = r[..end].trim();
            let quoted = key
                .strip_prefix('"')
                .and_then(|k| k.strip_suffix('"'))
                .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')));
            out.push(quoted.map(str::to_string));
            rest = r.get(end + 1..).unwrap_or("");
        } else {
            break;
        }
    }
    // The first item is the root, not a field.
    let root = out.remove(0);
    let mut all = vec![root];
    all.extend(out);
    all.into_iter()
        .enumerate()
        .map(|(i, p)| {
            if i == 0 {
                Some(p.unwrap_or_default())
            } else {
                p
            }
        })
        .collect()
}
