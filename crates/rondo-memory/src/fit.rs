//! Fitting what a template sees of a memory into its declared `max_bytes`.
//!
//! A view past its bound loses whole items first, oldest first, from the list that weighs
//! the most (while every text can keep [`KEEP`] bytes), then every text longer than some
//! length is cut to it with [`CUT_MARK`]: the longest length that fits. The walk keeps its
//! own stack: a value nested however deep is measured without recursion.

use serde_json::Value;

/// Appended to a text that was cut.
pub const CUT_MARK: &str = "…[cut]";

/// Texts keep this many bytes while whole items can still be left out instead.
pub const KEEP: usize = 256;

/// Cuts `value` until its compact JSON is at most `max` bytes; returns whether anything
/// was cut. A value whose fixed parts alone do not fit becomes `null`.
pub fn fit_json(value: &mut Value, max: usize) -> bool {
    if json_len(value, usize::MAX) <= max {
        return false;
    }
    // Whole items, oldest first, while texts can keep `KEEP` bytes.
    loop {
        let size = json_len(value, KEEP);
        if size <= max {
            break;
        }
        let Some(pointer) = heaviest_list(value) else {
            break;
        };
        let Some(Value::Array(items)) = value.pointer_mut(&pointer) else {
            break;
        };
        let excess = size - max;
        let mut freed = 0usize;
        let mut drop = 0usize;
        while drop < items.len() && freed < excess {
            freed += json_len(&items[drop], KEEP) + 1;
            drop += 1;
        }
        items.drain(..drop.max(1));
    }
    if json_len(value, usize::MAX) <= max {
        return true;
    }
    // The longest text length at which everything fits.
    let longest = longest_text(value);
    let (mut lo, mut hi) = (0usize, longest);
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        if json_len(value, mid) <= max {
            best = Some(mid);
            lo = mid + 1;
        } else if mid == 0 {
            break;
        } else {
            hi = mid - 1;
        }
    }
    match best {
        Some(cap) => cut_texts(value, cap),
        None => *value = Value::Null,
    }
    true
}

/// `text` as it is when it fits in `cap` bytes, else its first `cap` bytes (on a character
/// boundary) and [`CUT_MARK`]: never longer than it was.
fn capped(text: &str, cap: usize) -> Option<String> {
    if text.len() <= cap.saturating_add(CUT_MARK.len()) {
        return None;
    }
    let mut end = cap.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}{CUT_MARK}", &text[..end]))
}

fn escaped_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(0, |s| s.len())
}

/// The compact JSON length of `value` with every text capped at `cap` bytes.
pub fn json_len(value: &Value, cap: usize) -> usize {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(match v {
            Value::Null => 4,
            Value::Bool(b) => {
                if *b {
                    4
                } else {
                    5
                }
            }
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => match capped(s, cap) {
                Some(c) => escaped_len(&c),
                None => escaped_len(s),
            },
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len().saturating_sub(1)
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.len().saturating_sub(1)
                    + map.keys().map(|k| escaped_len(k) + 1).sum::<usize>()
            }
        });
    }
    total
}

/// The JSON pointer of the non-empty list weighing the most (texts capped at [`KEEP`]).
fn heaviest_list(value: &Value) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    let mut stack = vec![(value, String::new())];
    while let Some((v, at)) = stack.pop() {
        match v {
            Value::Array(items) => {
                if !items.is_empty() {
                    let weight = json_len(v, KEEP);
                    if best.as_ref().is_none_or(|(w, _)| weight > *w) {
                        best = Some((weight, at.clone()));
                    }
                }
                for (i, item) in items.iter().enumerate() {
                    stack.push((item, format!("{at}/{i}")));
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    stack.push((item, format!("{at}/{key}")));
                }
            }
            _ => {}
        }
    }
    best.map(|(_, at)| at)
}

fn longest_text(value: &Value) -> usize {
    let mut longest = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => longest = longest.max(s.len()),
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    longest
}

fn cut_texts(value: &mut Value, cap: usize) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                if let Some(c) = capped(s, cap) {
                    *s = c;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn len(v: &Value) -> usize {
        serde_json::to_string(v).unwrap().len()
    }

    #[test]
    fn json_len_is_the_compact_length() {
        let v = json!({"a": [1, 2.5, null, true, false, "x\n\"y"], "b": {"c": "é"}, "": []});
        assert_eq!(json_len(&v, usize::MAX), len(&v));
    }

    #[test]
    fn a_value_that_fits_is_left_alone() {
        let mut v = json!({"chain": [{"t": "a"}], "n": 1});
        let before = v.clone();
        assert!(!fit_json(&mut v, 1000));
        assert_eq!(v, before);
    }

    #[test]
    fn oldest_items_go_first_then_texts_are_cut() {
        let mut v = json!({
            "chain": (0..50).map(|i| json!({"id": i, "obs": "o".repeat(100)})).collect::<Vec<_>>(),
            "n": 50,
        });
        assert!(fit_json(&mut v, 1000));
        assert!(len(&v) <= 1000, "{}", len(&v));
        let chain = v["chain"].as_array().unwrap();
        assert!(!chain.is_empty());
        // The latest item stays, the first ones went.
        assert_eq!(chain.last().unwrap()["id"], 49);
        assert_ne!(chain[0]["id"], 0);

        let mut one = json!({"chain": [{"obs": "é".repeat(100_000)}], "n": 1});
        assert!(fit_json(&mut one, 600));
        assert!(len(&one) <= 600, "{}", len(&one));
        assert!(one["chain"][0]["obs"].as_str().unwrap().ends_with(CUT_MARK));
    }

    #[test]
    fn escapes_count_as_what_they_weigh() {
        let mut v = json!({"out": "\u{1}".repeat(10_000)});
        assert!(fit_json(&mut v, 300));
        assert!(len(&v) <= 300, "{}", len(&v));
    }

    #[test]
    fn fixed_parts_past_the_bound_leave_null() {
        let mut v = json!({"a_very_long_key_name_that_does_not_fit": 1});
        assert!(fit_json(&mut v, 10));
        assert_eq!(v, Value::Null);
    }

    #[test]
    fn deep_values_are_measured_without_recursion() {
        let mut v = json!("x");
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(json_len(&v, usize::MAX), 200_003);
        // Dropping a deep value recurses in serde's own Drop; leak it instead.
        std::mem::forget(v);
    }
}
