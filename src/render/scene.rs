//! The drawn graph: nodes sized to their text, laid out by [`super::layout`], with the SVG
//! path of every edge, the places of their labels and a legend. `rondo graph --format svg`
//! writes it ([`svg`]); the run viewer gets it as data and draws the same shapes.

use std::collections::BTreeMap;
use std::fmt::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::layout::{self, EdgePath, EdgeSpec, NodeSpec, Shape};

/// Font sizes (px) of a node's name, its second line, and edge labels.
pub const NAME_PX: f64 = 11.0;
pub const SUB_PX: f64 = 10.0;
pub const LABEL_PX: f64 = 10.0;
/// The fonts text is measured for ([`text_width`]); narrower fallbacks only leave room.
pub const FONT: &str = "DejaVu Sans, Verdana, sans-serif";
/// A condition is written on the edge in at most 3 lines of at most 15 characters, cut
/// with `…` past that (whole in its tooltip).
pub const LINE_CHARS: usize = 15;
pub const LABEL_LINES: usize = 3;
/// Distance between the baselines of a label's lines.
pub const LINE_H: f64 = 12.0;
const NAME_CHARS: usize = 40;
const SUB_CHARS: usize = 21;
const NODE_H: f64 = 38.0;
const NODE_PAD: f64 = 8.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_break_into_short_lines_and_are_cut_after_three() {
        assert_eq!(label_lines("otherwise"), ["otherwise"]);
        assert_eq!(
            label_lines("len(agent.calls) > 0"),
            ["len(agent.calls", ") > 0"]
        );
        assert_eq!(
            label_lines("compose.ok and compose.data.composed"),
            ["compose.ok and", "compose.data.co", "mposed"]
        );
        let long = label_lines("visits(planner) >= input.max_steps or visits(planner) >= 20");
        assert_eq!(
            long,
            ["visits(planner)", ">= input.max_st", "eps or visits(…"]
        );
        for lines in [
            long,
            label_lines(&"x".repeat(100)),
            label_lines("a b c d e f g h i j k l m n o p q r s t u v w x y z aa bb cc dd"),
        ] {
            assert!(lines.len() <= LABEL_LINES);
            assert!(
                lines.iter().all(|l| l.chars().count() <= LINE_CHARS),
                "{lines:?}"
            );
        }
        assert!(label_lines("").is_empty());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Start,
    Exit,
    Llm,
    Tool,
    Builtin,
    /// "after any step": where an exit guard's edge starts.
    Guard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    Route,
    Backtrack,
    /// A branch of a parallel route or a map's worker.
    Fork,
    Join,
    /// An exit guard, checked after any step.
    Guard,
}

/// The graph as drawn: sizes and coordinates in CSS pixels, y downwards, centres for nodes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    pub name: String,
    /// The drawing's size, legend included.
    pub width: f64,
    pub height: f64,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    /// A condition on several edges into one node, written once where they merge.
    pub labels: Vec<SharedLabel>,
    pub legend: Vec<LegendItem>,
    /// Edge crossings left by the layout.
    pub crossings: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphNode {
    pub id: String,
    pub name: String,
    pub kind: NodeKind,
    /// Lines of the node's tooltip.
    pub detail: Vec<String>,
    /// An exit's code.
    pub exit_code: Option<i32>,
    /// The name as written in the box (cut with `…` past 40 characters).
    pub title: String,
    /// The box's second line (`llm · openai`, `exit 0`).
    pub sub: String,
    /// Centre, width and height.
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphEdge {
    pub from: String,
    pub to: String,
    /// The route's index, as a run's `route` events name it; null for a join or a guard.
    pub route: Option<usize>,
    /// The whole condition (the edge's tooltip).
    pub label: String,
    pub kind: EdgeKind,
    /// SVG path data, from the boundary of `from` to the boundary of `to` (the arrowhead).
    pub path: String,
    /// The points the path passes through, its ends first and last.
    pub points: Vec<[f64; 2]>,
    /// The label written beside the edge; none when it has none or shares one.
    pub text: Option<EdgeText>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeText {
    /// The condition's lines, the last cut with `…` when it does not fit.
    pub lines: Vec<String>,
    /// Where the first line starts, on its baseline (the next ones 12 px lower each).
    pub x: f64,
    pub y: f64,
    /// The size of the text's box, from `y - 10`.
    pub w: f64,
    pub h: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedLabel {
    /// As [`EdgeText`]'s.
    pub lines: Vec<String>,
    /// The whole condition.
    pub title: String,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    /// How many edges share it.
    pub edges: usize,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    Start,
    Llm,
    Tool,
    Builtin,
    Exit,
    Guard,
    Route,
    Backtrack,
    Fork,
    Join,
    GuardEdge,
    Shared,
    Cut,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LegendItem {
    pub sample: Sample,
    pub text: String,
    /// The sample's top-left corner (28 x 14); the text follows it.
    pub x: f64,
    pub y: f64,
}

/// A node to lay out.
pub struct NodeIn {
    pub name: String,
    pub kind: NodeKind,
    pub detail: Vec<String>,
    pub exit_code: Option<i32>,
    pub sub: String,
    /// Its id in the drawing (`n3`).
    pub id: String,
}

/// An edge to lay out, between indices of the nodes.
pub struct EdgeIn {
    pub from: usize,
    pub to: usize,
    pub route: Option<usize>,
    pub label: String,
    pub kind: EdgeKind,
}

/// Width of `text` in DejaVu Sans at `px` (its advance widths, rounded up by class), with
/// 5% to spare: never narrower than the browser draws it.
pub fn text_width(text: &str, px: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | ' ' | '·' => 0.35,
            'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '{' | '}' | '-' | '/' | '\\' | '"' | '`'
            | 'I' | 'J' => 0.48,
            's' | 'z' | '*' | '_' => 0.56,
            'm' | 'w' | 'M' | 'W' | '@' | '%' | '…' => 1.0,
            '=' | '<' | '>' | '+' | '~' | '×' | '#' | '&' | '^' => 0.85,
            'a'..='z' | '0'..='9' | '$' | '?' => 0.64,
            'A'..='Z' => 0.8,
            c if c.is_ascii() => 0.7,
            _ => 1.0,
        })
        .sum();
    em * px * 1.05
}

/// `text` cut to `max` characters, the last one `…`.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// A condition in lines of at most [`LINE_CHARS`] characters, broken at spaces where it can,
/// at most [`LABEL_LINES`] of them, the last cut with `…` when the text goes on.
pub fn label_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            let room = LINE_CHARS.saturating_sub(used + usize::from(used > 0));
            if word.len() <= room {
                if used > 0 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            // A break at the space when it wastes little, else the word is split.
            if used > 0 && (room < 4 || (word.len() <= LINE_CHARS && LINE_CHARS - used <= 5)) {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            if used > 0 {
                line.push(' ');
            }
            line.extend(word.drain(..room));
            lines.push(std::mem::take(&mut line));
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > LABEL_LINES {
        lines.truncate(LABEL_LINES);
        let last = &mut lines[LABEL_LINES - 1];
        let keep: String = last.chars().take(LINE_CHARS - 1).collect();
        *last = format!("{}…", keep.trim_end());
    }
    lines
}

/// The box of a label's lines: width and height.
fn lines_size(lines: &[String]) -> (f64, f64) {
    let w = lines
        .iter()
        .map(|l| text_width(l, LABEL_PX))
        .fold(0.0, f64::max);
    (w, LINE_H * lines.len() as f64 + 1.0)
}

fn r1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn node_size(kind: NodeKind, title: &str, sub: &str) -> (f64, f64, Shape) {
    match kind {
        NodeKind::Start => (44.0, 44.0, Shape::Circle),
        NodeKind::Guard => (
            text_width(title, SUB_PX) + 2.0 * NODE_PAD,
            24.0,
            Shape::Rect,
        ),
        _ => {
            let name = text_width(title, NAME_PX);
            let second = text_width(sub, SUB_PX);
            // An exit's round ends take their radius from each side.
            let pad = if kind == NodeKind::Exit {
                NODE_H / 2.0
            } else {
                NODE_PAD
            };
            let shape = if kind == NodeKind::Exit {
                Shape::Pill
            } else {
                Shape::Rect
            };
            ((name.max(second) + 2.0 * pad).max(72.0), NODE_H, shape)
        }
    }
}

/// Smooth vertical curves through the points (tangents vertical at each point, so an
/// arrowhead at the end points along the edge's last stretch).
fn path_of(points: &[(f64, f64)], looped: bool) -> String {
    let mut d = String::new();
    let Some(&(x0, y0)) = points.first() else {
        return d;
    };
    let _ = write!(d, "M{:.1},{:.1}", x0, y0);
    if looped && points.len() == 4 {
        let (a, b, c) = (points[1], points[2], points[3]);
        let _ = write!(
            d,
            " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
            a.0 + 8.0,
            a.1 - 10.0,
            b.0 + 8.0,
            b.1 + 10.0,
            c.0,
            c.1
        );
        return d;
    }
    for pair in points.windows(2) {
        let ((ax, ay), (bx, by)) = (pair[0], pair[1]);
        let dy = (by - ay) / 2.0;
        let _ = write!(
            d,
            " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
            ax,
            ay + dy,
            bx,
            by - dy,
            bx,
            by
        );
    }
    d
}

/// Lays the nodes and edges out. Edges into one node that carry one condition are
/// merged: they meet at one label (a vertex of the layout) and go on as one edge.
pub fn lay_out(name: &str, nodes: Vec<NodeIn>, edges: Vec<EdgeIn>) -> Graph {
    let (mut specs, mut drawn) = sized_nodes(nodes);
    let sharing = Sharing::new(&edges, &mut specs);
    let (specs_edges, cut_any) = sharing.layout_edges(&edges);
    let placed = layout::layout(&specs, &specs_edges);
    for (i, n) in drawn.iter_mut().enumerate() {
        n.x = r1(placed.nodes[i].0);
        n.y = r1(placed.nodes[i].1);
    }
    let labels = sharing
        .anchors
        .iter()
        .map(|anchor| {
            let (x, y) = placed.nodes[anchor.vertex];
            let (w, h) = (specs[anchor.vertex].w, specs[anchor.vertex].h);
            SharedLabel {
                lines: anchor.lines.clone(),
                title: anchor.label.clone(),
                x: r1(x - w / 2.0 + 6.0),
                y: r1(y - h / 2.0 + 10.0),
                w: r1(w - 12.0),
                h: r1(h),
                edges: anchor.edges,
            }
        })
        .collect();
    let graph_edges = edges
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // Edge i is laid out as edge i, and, when it shares a label, the edge out of
            // its anchor.
            let out = sharing.shared[i].map(|k| &placed.edges[edges.len() + k]);
            graph_edge(e, &drawn, &placed.edges[i], out)
        })
        .collect();
    let samples = samples(&drawn, &edges, !sharing.anchors.is_empty(), cut_any);
    let (legend, right, bottom) = legend(samples, placed.width, placed.height);
    Graph {
        name: name.to_string(),
        width: r1(right).ceil(),
        height: r1(bottom + 14.0 + layout::MARGIN).ceil(),
        nodes: drawn,
        edges: graph_edges,
        labels,
        legend,
        crossings: placed.crossings,
    }
}

/// Each node's size for the layout, and the node as drawn (placed later).
fn sized_nodes(nodes: Vec<NodeIn>) -> (Vec<NodeSpec>, Vec<GraphNode>) {
    let mut specs: Vec<NodeSpec> = Vec::new();
    let mut drawn: Vec<GraphNode> = Vec::new();
    for n in nodes {
        let title = if n.kind == NodeKind::Start {
            "start".to_string()
        } else {
            shorten(&n.name, NAME_CHARS)
        };
        let sub = shorten(&n.sub, SUB_CHARS);
        let (w, h, shape) = node_size(n.kind, &title, &sub);
        // Kept to 0.1 px, rounded up: the page and the SVG draw these very numbers.
        let (w, h) = ((w * 10.0).ceil() / 10.0, (h * 10.0).ceil() / 10.0);
        specs.push(NodeSpec { w, h, shape });
        drawn.push(GraphNode {
            id: n.id,
            name: n.name,
            kind: n.kind,
            detail: n.detail,
            exit_code: n.exit_code,
            title,
            sub,
            x: 0.0,
            y: 0.0,
            w,
            h,
        });
    }
    (specs, drawn)
}

/// A label that several edges share: a vertex of the layout they pass through.
struct Anchor {
    vertex: usize,
    lines: Vec<String>,
    /// The whole condition.
    label: String,
    /// The node the one edge out of it goes to.
    to: usize,
    /// How many edges go into it.
    edges: usize,
}

/// Which edges share a label.
struct Sharing {
    /// The anchor of each edge, if it shares one.
    shared: Vec<Option<usize>>,
    anchors: Vec<Anchor>,
}

impl Sharing {
    /// Groups the edges by (target, condition, going back up), and gives each group of
    /// two or more an anchor (a layout vertex added to `specs`). Routes back up a loop
    /// merge apart from those coming down, so that one edge, not several, climbs back.
    fn new(edges: &[EdgeIn], specs: &mut Vec<NodeSpec>) -> Sharing {
        let ends: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
        let back = layout::back_edges(specs.len(), &ends);
        let mut groups: BTreeMap<(usize, &str, bool), Vec<usize>> = BTreeMap::new();
        for (i, e) in edges.iter().enumerate() {
            if !e.label.is_empty() && e.kind != EdgeKind::Join && e.from != e.to {
                groups
                    .entry((e.to, e.label.as_str(), back[i]))
                    .or_default()
                    .push(i);
            }
        }
        let mut first_group_edge: Vec<(usize, Vec<usize>)> = groups
            .into_iter()
            .filter(|(_, members)| members.len() > 1)
            .map(|((to, _, _), members)| (to, members))
            .collect();
        first_group_edge.sort_by_key(|(_, m)| m[0]);
        let mut sharing = Sharing {
            shared: vec![None; edges.len()],
            anchors: Vec::new(),
        };
        for (to, members) in first_group_edge {
            let label = edges[members[0]].label.clone();
            let lines = label_lines(&label);
            let (w, h) = lines_size(&lines);
            let vertex = specs.len();
            specs.push(NodeSpec {
                w: w + 12.0,
                h,
                shape: Shape::Anchor,
            });
            for &m in &members {
                sharing.shared[m] = Some(sharing.anchors.len());
            }
            sharing.anchors.push(Anchor {
                vertex,
                lines,
                label,
                to,
                edges: members.len(),
            });
        }
        sharing
    }

    /// The layout's edges: first each edge (or its piece into its anchor), then one edge
    /// out of each anchor, in the order the anchors were made; and whether any label was
    /// cut.
    fn layout_edges(&self, edges: &[EdgeIn]) -> (Vec<EdgeSpec>, bool) {
        let mut specs_edges: Vec<EdgeSpec> = Vec::with_capacity(edges.len() + self.anchors.len());
        let mut cut_any = false;
        for (i, e) in edges.iter().enumerate() {
            match self.shared[i] {
                Some(k) => specs_edges.push(EdgeSpec {
                    from: e.from,
                    to: self.anchors[k].vertex,
                    label: None,
                }),
                None => {
                    let label = (!e.label.is_empty() && e.kind != EdgeKind::Join).then(|| {
                        let t = label_lines(&e.label);
                        cut_any |= t.last().is_some_and(|l| l.ends_with('…'));
                        lines_size(&t)
                    });
                    specs_edges.push(EdgeSpec {
                        from: e.from,
                        to: e.to,
                        label,
                    });
                }
            }
        }
        for anchor in &self.anchors {
            cut_any |= anchor.lines.last().is_some_and(|l| l.ends_with('…'))
                && !anchor.label.ends_with('…');
            specs_edges.push(EdgeSpec {
                from: anchor.vertex,
                to: anchor.to,
                label: None,
            });
        }
        (specs_edges, cut_any)
    }
}

/// Edge `e` as drawn: its first piece `p`, then, when it shares a label, the piece `out`
/// of the label.
fn graph_edge(e: &EdgeIn, drawn: &[GraphNode], p: &EdgePath, out: Option<&EdgePath>) -> GraphEdge {
    let looped = e.from == e.to;
    // Paths are written from the rounded points, which the page data also holds.
    let round = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        pts.iter().map(|&(x, y)| (r1(x), r1(y))).collect()
    };
    let head = round(&p.points);
    let (points, d) = match out {
        Some(out) => {
            let tail = round(&out.points);
            let mut points = head.clone();
            points.extend(tail.iter().skip(1));
            let d = format!("{} {}", path_of(&head, false), path_of(&tail, false));
            (points, d)
        }
        None => (head.clone(), path_of(&head, looped)),
    };
    let text = match (out, p.label) {
        (None, Some((lx, ly))) => {
            let lines = label_lines(&e.label);
            let (w, h) = lines_size(&lines);
            Some(EdgeText {
                lines,
                x: r1(lx),
                y: r1(ly + 10.0),
                w: r1(w),
                h: r1(h),
            })
        }
        _ => None,
    };
    GraphEdge {
        from: drawn[e.from].name.clone(),
        to: drawn[e.to].name.clone(),
        route: e.route,
        label: e.label.clone(),
        kind: e.kind,
        path: d,
        points: points.iter().map(|&(x, y)| [r1(x), r1(y)]).collect(),
        text,
    }
}

/// What the legend shows: the kinds of node and edge in this graph, a shared label, a
/// cut one; in the legend's order.
fn samples(drawn: &[GraphNode], edges: &[EdgeIn], shared: bool, cut: bool) -> Vec<Sample> {
    let mut samples: Vec<Sample> = Vec::new();
    for n in drawn {
        samples.push(match n.kind {
            NodeKind::Start => Sample::Start,
            NodeKind::Llm => Sample::Llm,
            NodeKind::Tool => Sample::Tool,
            NodeKind::Builtin => Sample::Builtin,
            NodeKind::Exit => Sample::Exit,
            NodeKind::Guard => Sample::Guard,
        });
    }
    for e in edges {
        samples.push(match e.kind {
            EdgeKind::Route => Sample::Route,
            EdgeKind::Backtrack => Sample::Backtrack,
            EdgeKind::Fork => Sample::Fork,
            EdgeKind::Join => Sample::Join,
            EdgeKind::Guard => Sample::GuardEdge,
        });
    }
    if shared {
        samples.push(Sample::Shared);
    }
    if cut {
        samples.push(Sample::Cut);
    }
    samples.sort();
    samples.dedup();
    samples
}

/// The legend under a drawing `width` by `height`, in rows as wide as the drawing (at
/// least 420); the right edge it reaches, and the top of its last row.
fn legend(samples: Vec<Sample>, width: f64, height: f64) -> (Vec<LegendItem>, f64, f64) {
    let limit = width.max(420.0);
    let (mut x, mut y) = (layout::MARGIN, height + 4.0);
    let mut legend = Vec::new();
    let mut right = width;
    for s in samples {
        let text = match s {
            Sample::Start => "start",
            Sample::Llm => "llm role",
            Sample::Tool => "tool role",
            Sample::Builtin => "builtin role",
            Sample::Exit => "exit and its code",
            Sample::Guard => "exit guard",
            Sample::Route => "route",
            Sample::Backtrack => "backtrack",
            Sample::Fork => "fork / map branch",
            Sample::Join => "join",
            Sample::GuardEdge => "guard, after any step",
            Sample::Shared => "one condition on several routes",
            Sample::Cut => "cut: hover for the whole condition",
        };
        let w = 34.0 + text_width(text, LABEL_PX) + 18.0;
        if x > layout::MARGIN && x + w > limit - layout::MARGIN {
            x = layout::MARGIN;
            y += 20.0;
        }
        legend.push(LegendItem {
            sample: s,
            text: text.to_string(),
            x: r1(x),
            y: r1(y),
        });
        x += w;
        right = right.max(x - 18.0 + layout::MARGIN);
    }
    (legend, right, y)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Stroke and dash of each edge kind (the viewer's CSS holds the same).
fn edge_style(kind: EdgeKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        EdgeKind::Route => ("#8a96a3", "1.2", ""),
        EdgeKind::Backtrack => ("#b03030", "1.2", "5 3"),
        EdgeKind::Fork => ("#5a6b7b", "2.4", ""),
        EdgeKind::Join => ("#22303c", "2.4", ""),
        EdgeKind::Guard => ("#8a96a3", "1.2", "2 3"),
    }
}

/// The node's shape, as SVG elements (the viewer's script draws the same).
fn node_shape(out: &mut String, kind: NodeKind, x: f64, y: f64, w: f64, h: f64) {
    let (l, t) = (x - w / 2.0, y - h / 2.0);
    match kind {
        NodeKind::Start => {
            let _ = write!(
                out,
                r##"<circle cx="{x:.1}" cy="{y:.1}" r="{:.1}" fill="#eef1f4" stroke="#22303c" stroke-width="1.5"/>"##,
                w / 2.0
            );
        }
        NodeKind::Exit => {
            let _ = write!(
                out,
                r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" rx="{:.1}" fill="#fff" stroke="#22303c" stroke-width="1.2"/><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="{:.1}" fill="none" stroke="#22303c" stroke-width="1"/>"##,
                h / 2.0,
                l + 3.0,
                t + 3.0,
                w - 6.0,
                h - 6.0,
                h / 2.0 - 3.0
            );
        }
        NodeKind::Llm => {
            let _ = write!(
                out,
                r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" rx="6" fill="#fff" stroke="#3b6ea5" stroke-width="1.2"/>"##
            );
        }
        NodeKind::Tool => {
            let _ = write!(
                out,
                r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" rx="0" fill="#fff" stroke="#7a5a2f" stroke-width="1.2"/><path d="M{:.1},{t:.1} V{:.1}" stroke="#7a5a2f" stroke-width="1.2"/>"##,
                l + 5.0,
                t + h
            );
        }
        NodeKind::Builtin => {
            let _ = write!(
                out,
                r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" rx="6" fill="#fff" stroke="#5a6b7b" stroke-width="1.2" stroke-dasharray="4 2"/>"##
            );
        }
        NodeKind::Guard => {
            let _ = write!(
                out,
                r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" rx="3" fill="#fff" stroke="#8a96a3" stroke-width="1" stroke-dasharray="2 3"/>"##
            );
        }
    }
}

/// The graph as a standalone SVG document.
pub fn svg(g: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}">"##,
        w = g.width,
        h = g.height
    );
    let _ = writeln!(out, "<title>{}</title>", esc(&g.name));
    out.push_str("<defs>");
    for kind in [
        EdgeKind::Route,
        EdgeKind::Backtrack,
        EdgeKind::Fork,
        EdgeKind::Join,
        EdgeKind::Guard,
    ] {
        let (color, _, _) = edge_style(kind);
        let _ = write!(
            out,
            r#"<marker id="arrow-{}" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker>"#,
            kind_name(kind)
        );
    }
    out.push_str("</defs>\n");
    out.push_str(r##"<rect width="100%" height="100%" fill="#fff"/>"##);
    out.push('\n');
    for e in &g.edges {
        edge_svg(&mut out, e);
    }
    for l in &g.labels {
        let _ = write!(
            out,
            r#"<g class="shared"><title>{} ({} routes)</title>"#,
            esc(&l.title),
            l.edges
        );
        lines_svg(&mut out, &l.lines, l.x, l.y);
        out.push_str("</g>\n");
    }
    for n in &g.nodes {
        node_svg(&mut out, n);
    }
    out.push_str(r#"<g class="legend">"#);
    for item in &g.legend {
        legend_sample(&mut out, item.sample, item.x, item.y);
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="{LABEL_PX}" fill="#22303c">{}</text>"##,
            item.x + 34.0,
            item.y + 11.0,
            esc(&item.text)
        );
    }
    out.push_str("</g>\n</svg>\n");
    out
}

/// An edge as an SVG group: its path, its arrow and its own label.
fn edge_svg(out: &mut String, e: &GraphEdge) {
    let (color, width, dash) = edge_style(e.kind);
    let _ = write!(
        out,
        r#"<g class="edge {}" data-from="{}" data-to="{}">"#,
        kind_name(e.kind),
        esc(&e.from),
        esc(&e.to)
    );
    if !e.label.is_empty() {
        let _ = write!(out, "<title>{}</title>", esc(&e.label));
    }
    let _ = write!(
        out,
        r#"<path d="{}" fill="none" stroke="{color}" stroke-width="{width}"{} marker-end="url(#arrow-{})"/>"#,
        e.path,
        if dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{dash}""#)
        },
        kind_name(e.kind)
    );
    if let Some(t) = &e.text {
        lines_svg(out, &t.lines, t.x, t.y);
    }
    out.push_str("</g>\n");
}

/// A node as an SVG group: its shape, its name and its kind (or role), its details as the
/// tooltip.
fn node_svg(out: &mut String, n: &GraphNode) {
    let _ = write!(
        out,
        r#"<g class="node {}" data-name="{}">"#,
        kind_name_node(n.kind),
        esc(&n.name)
    );
    let mut tip = n.name.clone();
    for line in &n.detail {
        tip.push('\n');
        tip.push_str(line);
    }
    let _ = write!(out, "<title>{}</title>", esc(&tip));
    node_shape(out, n.kind, n.x, n.y, n.w, n.h);
    match n.kind {
        NodeKind::Start => {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">start</text>"#,
                n.x,
                n.y + 4.0
            );
        }
        NodeKind::Guard => {
            let _ = write!(
                out,
                r##"<text x="{:.1}" y="{:.1}" font-size="{SUB_PX}" text-anchor="middle" fill="#55616d">{}</text>"##,
                n.x,
                n.y + 3.5,
                esc(&n.title)
            );
        }
        _ => {
            let _ = write!(
                out,
                r##"<text x="{:.1}" y="{:.1}" font-size="{NAME_PX}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" font-size="{SUB_PX}" text-anchor="middle" fill="#55616d">{}</text>"##,
                n.x,
                n.y - 2.0,
                esc(&n.title),
                n.x,
                n.y + 12.0,
                esc(&n.sub)
            );
        }
    }
    out.push_str("</g>\n");
}

fn lines_svg(out: &mut String, lines: &[String], x: f64, y: f64) {
    for (i, line) in lines.iter().enumerate() {
        let _ = write!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" font-size="{LABEL_PX}" fill="#55616d">{}</text>"##,
            y + LINE_H * i as f64,
            esc(line)
        );
    }
}

fn legend_sample(out: &mut String, sample: Sample, x: f64, y: f64) {
    let node = |out: &mut String, kind| node_shape(out, kind, x + 14.0, y + 7.0, 28.0, 14.0);
    let edge = |out: &mut String, kind: EdgeKind| {
        let (color, width, dash) = edge_style(kind);
        let _ = write!(
            out,
            r#"<path d="M{:.1},{:.1} H{:.1}" stroke="{color}" stroke-width="{width}" stroke-dasharray="{}" marker-end="url(#arrow-{})"/>"#,
            x,
            y + 7.0,
            x + 28.0,
            if dash.is_empty() { "none" } else { dash },
            kind_name(kind)
        );
    };
    match sample {
        Sample::Start => {
            let _ = write!(
                out,
                r##"<circle cx="{:.1}" cy="{:.1}" r="7" fill="#eef1f4" stroke="#22303c" stroke-width="1.5"/>"##,
                x + 14.0,
                y + 7.0
            );
        }
        Sample::Llm => node(out, NodeKind::Llm),
        Sample::Tool => node(out, NodeKind::Tool),
        Sample::Builtin => node(out, NodeKind::Builtin),
        Sample::Exit => node(out, NodeKind::Exit),
        Sample::Guard => node(out, NodeKind::Guard),
        Sample::Route => edge(out, EdgeKind::Route),
        Sample::Backtrack => edge(out, EdgeKind::Backtrack),
        Sample::Fork => edge(out, EdgeKind::Fork),
        Sample::Join => edge(out, EdgeKind::Join),
        Sample::GuardEdge => edge(out, EdgeKind::Guard),
        Sample::Shared | Sample::Cut => {
            let _ = write!(
                out,
                r##"<text x="{:.1}" y="{:.1}" font-size="{LABEL_PX}" fill="#55616d">{}</text>"##,
                x,
                y + 11.0,
                if sample == Sample::Shared {
                    "a ⇉"
                } else {
                    "ab…"
                }
            );
        }
    }
}

pub fn kind_name(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Route => "route",
        EdgeKind::Backtrack => "backtrack",
        EdgeKind::Fork => "fork",
        EdgeKind::Join => "join",
        EdgeKind::Guard => "guard",
    }
}

fn kind_name_node(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Start => "start",
        NodeKind::Exit => "exit",
        NodeKind::Llm => "llm",
        NodeKind::Tool => "tool",
        NodeKind::Builtin => "builtin",
        NodeKind::Guard => "guard",
    }
}
