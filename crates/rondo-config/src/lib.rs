//! The value syntax shared by Rondo's workflow language, its YAML provider profiles and its
//! YAML tool specs, so that each value is read by one function wherever it is written.
//!
//! - [`duration`]: `500ms`, `1.5s`, `2m`, `1h`; a bare number is seconds.
//! - [`size`]: `4MB`, `512k`, `1GiB`; a bare number is bytes.
//! - [`yaml`]: parsing with positions, and where each field of a mapping is written.

pub mod duration;
pub mod size;
pub mod yaml;

pub use duration::{DurationError, duration_from_secs, format_duration, parse_duration};
pub use size::parse_size;
pub use yaml::{FieldPos, Fields, Pos, YamlError};
