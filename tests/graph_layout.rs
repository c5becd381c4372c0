//! The graph drawn without Graphviz: the layered layout of every shipped workflow, checked on
//! its coordinates (no two boxes overlap, labels keep off the boxes, every edge runs from
//! the boundary of one node to the boundary of another, the drawing fits a page), and
//! `rondo graph --format svg` and `rondo serve`'s svg graph with no `dot` on PATH.
//! tests/viewer.rs checks the same drawing in Chromium, with its real fonts.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use rondo::render::scene::{Graph, GraphNode, NAME_PX, NodeKind, text_width};

/// What a 1400 px wide browser window leaves the graph: the page's padding and borders.
const PAGE: f64 = 1366.0;

fn graph_of(path: &std::path::Path) -> Graph {
    let (_, workflow, _, _) = common::check_path(path, true);
    rondo::render::graph_data(&workflow)
}

struct Rect {
    l: f64,
    t: f64,
    r: f64,
    b: f64,
}

impl Rect {
    fn of(n: &GraphNode) -> Rect {
        Rect {
            l: n.x - n.w / 2.0,
            t: n.y - n.h / 2.0,
            r: n.x + n.w / 2.0,
            b: n.y + n.h / 2.0,
        }
    }
    fn overlaps(&self, o: &Rect) -> bool {
        self.l < o.r && o.l < self.r && self.t < o.b && o.t < self.b
    }
}

/// How far `p` is from the boundary of the node's shape.
fn off_boundary(n: &GraphNode, p: [f64; 2]) -> f64 {
    let (dx, dy) = ((p[0] - n.x).abs(), (p[1] - n.y).abs());
    if n.kind == NodeKind::Start {
        return ((dx * dx + dy * dy).sqrt() - n.w / 2.0).abs();
    }
    let (hw, hh) = (n.w / 2.0, n.h / 2.0);
    if n.kind == NodeKind::Exit && dx > hw - hh {
        return ((((dx - (hw - hh)).powi(2) + dy * dy).sqrt()) - hh).abs();
    }
    if dx <= hw + 0.2 && dy <= hh + 0.2 {
        (hw - dx).min(hh - dy).abs()
    } else {
        ((dx - hw).max(0.0).powi(2) + (dy - hh).max(0.0).powi(2)).sqrt()
    }
}

/// Checks a laid-out graph; returns what is wrong.
fn faults(g: &Graph) -> Vec<String> {
    let mut faults = Vec::new();
    let boxes: Vec<Rect> = g.nodes.iter().map(Rect::of).collect();
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if boxes[i].overlaps(&boxes[j]) {
                faults.push(format!("{} overlaps {}", g.nodes[i].name, g.nodes[j].name));
            }
        }
        let n = &g.nodes[i];
        let room = if n.kind == NodeKind::Exit { n.h } else { 8.0 };
        let px = if n.kind == NodeKind::Guard {
            10.0
        } else {
            NAME_PX
        };
        if n.kind != NodeKind::Start && text_width(&n.title, px) > n.w - room + 0.01 {
            faults.push(format!("{}: its name leaves its box", n.name));
        }
        if boxes[i].l < 0.0 || boxes[i].r > g.width || boxes[i].b > g.height {
            faults.push(format!("{} is outside the drawing", n.name));
        }
    }
    let mut texts: Vec<(String, Rect)> = Vec::new();
    for e in &g.edges {
        if let Some(t) = &e.text {
            texts.push((
                t.lines.join(" "),
                Rect {
                    l: t.x,
                    t: t.y - 10.0,
                    r: t.x + t.w,
                    b: t.y - 10.0 + t.h,
                },
            ));
        }
        let by = |name: &str| g.nodes.iter().find(|n| n.name == name);
        let (Some(from), Some(to)) = (by(&e.from), by(&e.to)) else {
            faults.push(format!("{} -> {}: an end is not a node", e.from, e.to));
            continue;
        };
        let (first, last) = (e.points[0], *e.points.last().unwrap());
        if off_boundary(from, first) > 0.5 {
            faults.push(format!("{} -> {} starts at {first:?}", e.from, e.to));
        }
        if off_boundary(to, last) > 0.5 {
            faults.push(format!("{} -> {} ends at {last:?}", e.from, e.to));
        }
        if !e
            .path
            .starts_with(&format!("M{:.1},{:.1}", first[0], first[1]))
        {
            faults.push(format!("{} -> {}: its path starts elsewhere", e.from, e.to));
        }
    }
    for l in &g.labels {
        texts.push((
            l.lines.join(" "),
            Rect {
                l: l.x,
                t: l.y - 10.0,
                r: l.x + l.w,
                b: l.y - 10.0 + l.h,
            },
        ));
    }
    for (i, (text, r)) in texts.iter().enumerate() {
        for (n, b) in g.nodes.iter().zip(&boxes) {
            if r.overlaps(b) {
                faults.push(format!("label `{text}` is over {}", n.name));
            }
        }
        for (other, o) in &texts[i + 1..] {
            if r.overlaps(o) {
                faults.push(format!("label `{text}` is over label `{other}`"));
            }
        }
        if r.r > g.width {
            faults.push(format!("label `{text}` is outside the drawing"));
        }
    }
    if g.width > PAGE {
        faults.push(format!("{} px wide, more than a page's {PAGE}", g.width));
    }
    faults
}

#[test]
fn every_shipped_workflow_is_laid_out_without_overlaps_and_fits_a_page() {
    for path in common::workflow_files() {
        let g = graph_of(&path);
        eprintln!(
            "{}: {} nodes, {} edges, {} x {} px, {} crossings",
            g.name,
            g.nodes.len(),
            g.edges.len(),
            g.width,
            g.height,
            g.crossings
        );
        // Kept for a look: target/graphs/NAME.svg.
        let dir = common::root().join("target/graphs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{}.svg", g.name)),
            rondo::render::scene::svg(&g),
        )
        .unwrap();
        let faults = faults(&g);
        assert!(
            faults.is_empty(),
            "{}:\n{}",
            path.display(),
            faults.join("\n")
        );
        // The same workflow lays out to the same bytes.
        let again = graph_of(&path);
        assert_eq!(
            serde_json::to_string(&g).unwrap(),
            serde_json::to_string(&again).unwrap()
        );
    }
}

/// The checks above catch what they are for: a graph with two boxes moved onto each other,
/// an edge moved off its node and a label over a box has three faults.
#[test]
fn the_layout_checks_find_overlaps_and_loose_edges() {
    let mut g = graph_of(&common::root().join("workflows/micro_agent.rondo"));
    assert!(faults(&g).is_empty());
    let (x, y) = (g.nodes[1].x, g.nodes[1].y);
    g.nodes[2].x = x + 3.0;
    g.nodes[2].y = y;
    let e = g
        .edges
        .iter_mut()
        .find(|e| e.text.is_some() && e.from != g.nodes[2].name && e.to != g.nodes[2].name)
        .unwrap();
    e.points[0][0] -= 30.0;
    let t = e.text.as_mut().unwrap();
    t.x = x;
    t.y = y;
    let found = faults(&g);
    assert!(found.iter().any(|f| f.contains("overlaps")), "{found:?}");
    assert!(found.iter().any(|f| f.contains("starts at")), "{found:?}");
    assert!(found.iter().any(|f| f.contains("is over")), "{found:?}");
}

/// The same condition on several edges into one node is written once; long ones are cut
/// on the edge and whole in its tooltip.
#[test]
fn a_shared_condition_is_written_once_and_long_ones_are_cut() {
    let g = graph_of(&common::root().join("workflows/micro_agent.rondo"));
    let long = "visits(planner) >= input.max_steps or visits(planner) >= 20";
    let into_compose: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.to == "compose" && e.label == long)
        .collect();
    assert_eq!(into_compose.len(), 6);
    assert!(into_compose.iter().all(|e| e.text.is_none()));
    let shared: Vec<_> = g.labels.iter().filter(|l| l.title == long).collect();
    assert_eq!(shared.len(), 1, "{:?}", g.labels);
    assert_eq!(shared[0].edges, 6);
    let lines = &shared[0].lines;
    assert!(
        lines.last().unwrap().ends_with('…') && lines.len() == 3,
        "{lines:?}"
    );
    // The six edges meet: they end along one stretch, from the label to compose.
    let tails: Vec<_> = into_compose
        .iter()
        .map(|e| e.points[e.points.len() - 2..].to_vec())
        .collect();
    assert!(tails.windows(2).all(|w| w[0] == w[1]), "{tails:?}");
    let svg = rondo::render::scene::svg(&g);
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('>', "&gt;")
            .replace('<', "&lt;")
    };
    // Its first line is written once (the second is also the agent loop's).
    assert_eq!(svg.matches(">visits(planner)<").count(), 1);
    assert!(svg.contains(&format!("<title>{} (6 routes)</title>", esc(long))));
    // The legend names what the graph holds.
    let legend: Vec<&str> = g.legend.iter().map(|l| l.text.as_str()).collect();
    for kind in [
        "start",
        "llm role",
        "tool role",
        "exit and its code",
        "route",
    ] {
        assert!(legend.contains(&kind), "{legend:?}");
    }
}

/// A directory holding only `rondo`'s name for nothing: PATH without Graphviz.
fn path_without_dot() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    assert!(!dir.path().join("dot").exists());
    dir
}

#[test]
fn svg_is_drawn_without_graphviz() {
    let empty = path_without_dot();
    for path in common::workflow_files() {
        let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
            .args(["graph", path.to_str().unwrap(), "--format", "svg"])
            .current_dir(common::root())
            .env("PATH", empty.path())
            .output()
            .unwrap();
        common::assert_success(&out);
        let svg = String::from_utf8(out.stdout).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        let g = graph_of(&path);
        for n in &g.nodes {
            assert!(
                svg.contains(&format!("data-name=\"{}\"", n.name)),
                "{}",
                n.name
            );
        }
        assert_eq!(svg.matches("<g class=\"edge ").count(), g.edges.len());
    }
}

#[test]
fn serve_answers_the_svg_graph_without_graphviz() {
    let empty = path_without_dot();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(common::root())
        .args(["serve", "workflows/ds_star.rondo", "--port", "0"])
        .env("PATH", empty.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let addr = first
        .strip_prefix("listening on http://")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET /workflows/ds_star/graph?format=svg HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("content-type: image/svg+xml"), "{answer}");
    assert!(answer.contains("<svg xmlns"), "{answer}");
    assert!(answer.contains("data-name=\"success\""), "{answer}");
}

/// Every fixture that compiles, however odd (loops onto themselves, unreachable roles,
/// parallel routes, maps, exit guards, workflows with errors), lays out with no overlap
/// and with every edge on its nodes.
#[test]
fn every_fixture_is_laid_out_without_overlaps() {
    let mut laid = 0;
    for path in common::files_with_ext(&common::root().join("tests/fixtures"), "rondo") {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let file = rondo::source::SourceFile::new(&path, text.as_str());
        let (workflow, _) = rondo::compile::load(&file);
        let g = rondo::render::graph_data(&workflow);
        let found: Vec<String> = faults(&g)
            .into_iter()
            .filter(|f| !f.contains("more than a page"))
            .collect();
        assert!(
            found.is_empty(),
            "{}:\n{}",
            path.display(),
            found.join("\n")
        );
        laid += 1;
    }
    assert!(laid > 50, "only {laid} fixtures compiled");
}
