//! What calls spend, and the budget checks made before a call.

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

use crate::profile::ProviderProfile;
use crate::types::{ChatRequest, Usage};

/// Calls, tokens and cost added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub calls: u64,
    pub usage: Usage,
    pub cost: f64,
}

impl AddAssign for Spend {
    fn add_assign(&mut self, o: Spend) {
        self.calls += o.calls;
        self.usage += o.usage;
        self.cost += o.cost;
    }
}

/// The most a call could use, estimated before it is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CallEstimate {
    /// About 4 characters per token plus a few per message: a deliberate over-estimate.
    pub input_tokens: u64,
    /// The request's `max_tokens`, else the profile's, else 0 (unbounded calls count input only).
    pub max_output_tokens: u64,
    pub max_cost: f64,
}

impl CallEstimate {
    pub fn max_tokens(&self) -> u64 {
        self.input_tokens + self.max_output_tokens
    }
}

pub fn estimate_input_tokens(req: &ChatRequest) -> u64 {
    let mut chars = 0usize;
    for m in &req.messages {
        chars += m.content.len() + 16;
        for c in m.tool_calls.iter().flatten() {
            chars += c.name.len() + c.arguments.to_string().len();
        }
    }
    for t in &req.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    if let Some((_, s)) = &req.response_schema {
        chars += s.to_string().len();
    }
    chars.div_ceil(4) as u64
}

/// Estimate a call on `profile` (prices and default `max_tokens` from the profile).
pub fn estimate_call(profile: &ProviderProfile, req: &ChatRequest) -> CallEstimate {
    let input_tokens = estimate_input_tokens(req);
    let max_output_tokens = req.max_tokens.or(profile.max_tokens).unwrap_or(0) as u64;
    let max_cost = profile.cost(&Usage {
        input_tokens,
        output_tokens: max_output_tokens,
    });
    CallEstimate {
        input_tokens,
        max_output_tokens,
        max_cost,
    }
}

/// Limits for a role or a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum LimitExceeded {
    #[error(
        "token limit {limit} would be exceeded: {spent} spent, up to {next} more for this call"
    )]
    Tokens { limit: u64, spent: u64, next: u64 },
    #[error(
        "cost limit {limit:.4} would be exceeded: {spent:.4} spent, up to {next:.4} more for this call"
    )]
    Cost { limit: f64, spent: f64, next: f64 },
}

impl Budget {
    /// `Err` when `spent` has reached a limit already: no call may start.
    pub fn check_spent(&self, spent: &Spend) -> Result<(), LimitExceeded> {
        if let Some(limit) = self.max_tokens
            && spent.usage.total() >= limit
        {
            return Err(LimitExceeded::Tokens {
                limit,
                spent: spent.usage.total(),
                next: 0,
            });
        }
        if let Some(limit) = self.max_cost
            && spent.cost >= limit
        {
            return Err(LimitExceeded::Cost {
                limit,
                spent: spent.cost,
                next: 0.0,
            });
        }
        Ok(())
    }

    /// `Err` when `spent` plus the worst case of the next call goes over a limit: the
    /// interpreter then stops with a `limit` status instead of calling.
    pub fn check(&self, spent: &Spend, next: &CallEstimate) -> Result<(), LimitExceeded> {
        if let Some(limit) = self.max_tokens {
            let spent = spent.usage.total();
            if spent + next.max_tokens() > limit {
                return Err(LimitExceeded::Tokens {
                    limit,
                    spent,
                    next: next.max_tokens(),
                });
            }
        }
        if let Some(limit) = self.max_cost
            && spent.cost + next.max_cost > limit
        {
            return Err(LimitExceeded::Cost {
                limit,
                spent: spent.cost,
                next: next.max_cost,
            });
        }
        Ok(())
    }
}
