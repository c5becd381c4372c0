//! Default prices per model (`config/model_prices.yaml`): what a profile that names a known
//! model and writes no `price` of its own is charged, so budgets and `rondo check --cost`
//! see its calls. The table is compiled in; a cost from it is an estimate.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Where the table comes from, as docs and reports name it.
pub const TABLE_PATH: &str = "config/model_prices.yaml";

const TABLE: &str = include_str!("../../../config/model_prices.yaml");

/// Prices in the profile's currency (USD by convention) per 1000 tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[serde(default)]
    pub input_per_1k: f64,
    #[serde(default)]
    pub output_per_1k: f64,
}

impl Price {
    pub fn cost(&self, usage: &crate::Usage) -> f64 {
        usage.input_tokens as f64 / 1000.0 * self.input_per_1k
            + usage.output_tokens as f64 / 1000.0 * self.output_per_1k
    }
}

type Table = BTreeMap<String, BTreeMap<String, Price>>;

fn table() -> &'static Table {
    static PARSED: OnceLock<Table> = OnceLock::new();
    // The file is part of the build and parsed by a test: an error here is a bad build.
    PARSED.get_or_init(|| rondo_config::yaml::from_str(TABLE).unwrap_or_default())
}

/// The default price of `model` on a profile of kind `kind` (its name): its entry, or the entry of the
/// model it is a dated snapshot of (`gpt-4o-2024-08-06`, `claude-3-5-sonnet-20241022`,
/// `claude-3-5-haiku-latest`, `gemini-1.5-flash-002`). Local and other kinds have none.
pub fn default_price(kind: &str, model: &str) -> Option<Price> {
    let block = table().get(kind)?;
    let model = model.trim();
    let model = model.strip_prefix("models/").unwrap_or(model);
    if let Some(p) = block.get(model) {
        return Some(*p);
    }
    // The longest entry the name is a snapshot of (`gpt-4o-mini-...` is not `gpt-4o`'s).
    block
        .iter()
        .filter(|(name, _)| {
            model
                .strip_prefix(name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(is_snapshot_suffix)
        })
        .max_by_key(|(name, _)| name.len())
        .map(|(_, p)| *p)
}

/// `20241022`, `2024-08-06`, `002`, `latest`: a date or a version of the same model, never
/// another model (`mini`, `4-5`).
fn is_snapshot_suffix(rest: &str) -> bool {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if rest == "latest" || digits(rest, 3) || digits(rest, 8) {
        return true;
    }
    let parts: Vec<&str> = rest.split('-').collect();
    matches!(parts.as_slice(), [y, m, d] if digits(y, 4) && digits(m, 2) && digits(d, 2))
}

/// Every entry, by kind: for the docs and their test.
pub fn entries() -> impl Iterator<Item = (&'static str, &'static str, Price)> {
    table().iter().flat_map(|(kind, models)| {
        models
            .iter()
            .map(move |(m, p)| (kind.as_str(), m.as_str(), *p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ProviderKind;

    #[test]
    fn the_table_parses_and_every_block_is_a_kind_with_prices() {
        let parsed: Table = rondo_config::yaml::from_str(TABLE).expect("config/model_prices.yaml");
        assert_eq!(
            parsed.keys().map(String::as_str).collect::<Vec<_>>(),
            ["anthropic", "gemini", "openai"]
        );
        for (kind, models) in &parsed {
            assert!(ProviderKind::parse(kind).is_some(), "{kind}");
            for (model, p) in models {
                assert!(
                    p.input_per_1k > 0.0 && p.output_per_1k > p.input_per_1k,
                    "{model}"
                );
            }
        }
    }

    #[test]
    fn a_snapshot_takes_its_models_price_and_another_model_does_not() {
        let price = |kind: ProviderKind, model| {
            default_price(kind.as_str(), model).map(|p| (p.input_per_1k, p.output_per_1k))
        };
        assert_eq!(price(ProviderKind::OpenAi, "gpt-4o"), Some((0.0025, 0.01)));
        assert_eq!(
            price(ProviderKind::OpenAi, "gpt-4o-2024-08-06"),
            Some((0.0025, 0.01))
        );
        assert_eq!(
            price(ProviderKind::OpenAi, "gpt-4o-mini"),
            Some((0.00015, 0.0006))
        );
        assert_eq!(
            price(ProviderKind::Anthropic, "claude-3-5-sonnet-20241022"),
            Some((0.003, 0.015))
        );
        assert_eq!(
            price(ProviderKind::Anthropic, "claude-3-5-haiku-latest"),
            Some((0.0008, 0.004))
        );
        assert_eq!(
            price(ProviderKind::Gemini, "models/gemini-1.5-flash-002"),
            Some((0.000075, 0.0003))
        );
        // Another model of the family, a local kind, an unknown name: no price.
        assert_eq!(price(ProviderKind::Anthropic, "claude-opus-4-5"), None);
        assert_eq!(price(ProviderKind::OpenAi, "gpt-4o-mini-tts"), None);
        assert_eq!(price(ProviderKind::Ollama, "gpt-4o"), None);
        assert_eq!(price(ProviderKind::OpenAiCompatible, "gpt-4o"), None);
        assert_eq!(price(ProviderKind::OpenAi, "my-model"), None);
    }
}
