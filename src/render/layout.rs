//! A layered (Sugiyama) layout after dagre's: cycles broken by a depth-first search, ranks by
//! longest path with every edge two ranks long (its label, or a bend point, gets the rank
//! between), long edges cut by bend points, crossings reduced by barycenter sweeps and
//! adjacent swaps (the best order kept), and x coordinates pulled towards the neighbours
//! under the order's separations (a weighted isotonic regression per layer, so long edges
//! run straight). Everything is deterministic: the same input gives the same coordinates.
//! (The `layout-rs` crate was weighed: it reduces crossings by adjacent swaps only and hands
//! out coordinates only through its own drawing backend, with no place for a label beside
//! its edge nor a way to tell which drawn line is which route.)

/// How a node's boundary clips the edges that end on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    Rect,
    /// A rectangle with half-circle ends.
    Pill,
    Circle,
    /// Edges end at the node's port (a label that a bundle of edges passes through).
    Anchor,
}

#[derive(Debug, Clone, Copy)]
pub struct NodeSpec {
    pub w: f64,
    pub h: f64,
    pub shape: Shape,
}

#[derive(Debug, Clone, Copy)]
pub struct EdgeSpec {
    pub from: usize,
    pub to: usize,
    /// The label's width and height: it gets a place of its own beside the edge.
    pub label: Option<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct EdgePath {
    /// From the boundary of `from` to the boundary of `to`.
    pub points: Vec<(f64, f64)>,
    /// The label's top-left corner.
    pub label: Option<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct Placed {
    /// Node centres.
    pub nodes: Vec<(f64, f64)>,
    pub edges: Vec<EdgePath>,
    pub width: f64,
    pub height: f64,
    /// Crossings between layers in the order kept.
    pub crossings: usize,
}

pub const MARGIN: f64 = 12.0;
const LAYER_GAP: f64 = 16.0;
const NODE_GAP: f64 = 16.0;
const DUMMY_GAP: f64 = 10.0;
const LABEL_PAD: f64 = 6.0;
/// Bend points made at most: a huge workflow whose loops span thousands of ranks still
/// lays out in bounded memory.
const BEND_BUDGET: usize = 100_000;
/// Beyond this many layout vertices the order gets fewer sweeps (a 10,000-role workflow
/// still draws in well under a second).
const LARGE: usize = 4000;

struct Vertex {
    w: f64,
    h: f64,
    /// Where edges pass, from the centre (a label keeps its edge on its left side).
    port: f64,
    real: bool,
}

/// Ports of an anchor and of an edge's label: the edge runs down the left side, the text
/// to its right.
fn port_of(w: f64, shape: Shape) -> f64 {
    match shape {
        Shape::Anchor => -w / 2.0,
        _ => 0.0,
    }
}

pub fn layout(nodes: &[NodeSpec], edges: &[EdgeSpec]) -> Placed {
    let n = nodes.len();
    // Cycles: a depth-first search in input order; an edge to a node on the stack is
    // turned round for the layout (drawn back the right way).
    let ends: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
    let reversed = back_edges(n, &ends);
    let oriented: Vec<(usize, usize)> = ends
        .iter()
        .zip(&reversed)
        .map(|(&(a, b), &back)| if back { (b, a) } else { (a, b) })
        .collect();
    let laid: Vec<usize> = (0..edges.len())
        .filter(|&i| edges[i].from != edges[i].to && edges[i].from < n && edges[i].to < n)
        .collect();
    let rank = ranks(n, &laid, &oriented);
    let g = Layered::new(nodes, edges, &laid, &oriented, rank);
    let best = order(&g);
    let x = x_coordinates(&g, &best.layers);
    let (layer_y, bottom) = layer_centres(&g, &best.layers);
    let at = Coords {
        nodes,
        g: &g,
        x: &x,
        layer_y: &layer_y,
    };
    let paths: Vec<EdgePath> = edges
        .iter()
        .enumerate()
        .map(|(i, e)| at.edge_path(i, e, reversed[i]))
        .collect();
    let width = at.width(edges, &paths);
    Placed {
        nodes: (0..n).map(|v| at.centre(v)).collect(),
        edges: paths,
        width,
        height: (bottom - LAYER_GAP + MARGIN).max(2.0 * MARGIN),
        crossings: best.count,
    }
}

/// Ranks by longest path from the sources, two ranks an edge; a source other than the
/// first node then sits just above its nearest successor, and a node on no edge (a
/// `finally` role) goes to the bottom, beside the exits.
fn ranks(n: usize, laid: &[usize], oriented: &[(usize, usize)]) -> Vec<usize> {
    let mut indegree = vec![0usize; n];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &i in laid {
        let (a, b) = oriented[i];
        indegree[b] += 1;
        succ[a].push(b);
    }
    let mut rank = vec![0usize; n];
    let mut queue: std::collections::VecDeque<usize> =
        (0..n).filter(|&v| indegree[v] == 0).collect();
    let mut topo = Vec::with_capacity(n);
    let mut left = indegree.clone();
    while let Some(v) = queue.pop_front() {
        topo.push(v);
        for &w in &succ[v] {
            rank[w] = rank[w].max(rank[v] + 2);
            left[w] -= 1;
            if left[w] == 0 {
                queue.push_back(w);
            }
        }
    }
    for &v in topo.iter().rev() {
        if v != 0 && indegree[v] == 0 && !succ[v].is_empty() {
            let nearest = succ[v].iter().map(|&w| rank[w]).min().unwrap_or(2);
            rank[v] = nearest.saturating_sub(2);
        }
    }
    let bottom = rank.iter().copied().max().unwrap_or(0);
    for v in 1..n {
        if indegree[v] == 0 && succ[v].is_empty() {
            rank[v] = bottom;
        }
    }
    rank
}

/// The graph laid out: the nodes, then a bend point on every rank an edge crosses (its
/// label on the middle one), with weighted links between consecutive ranks.
struct Layered {
    verts: Vec<Vertex>,
    vrank: Vec<usize>,
    /// Each laid edge's vertices, from its upper end to its lower end.
    chains: Vec<Vec<usize>>,
    /// The bend point that carries each edge's label.
    label_vertex: Vec<Option<usize>>,
    up: Vec<Vec<(usize, f64)>>,
    down: Vec<Vec<(usize, f64)>>,
    layers_n: usize,
}

impl Layered {
    fn new(
        nodes: &[NodeSpec],
        edges: &[EdgeSpec],
        laid: &[usize],
        oriented: &[(usize, usize)],
        rank: Vec<usize>,
    ) -> Layered {
        let mut g = Layered {
            verts: nodes
                .iter()
                .map(|s| Vertex {
                    w: s.w,
                    h: s.h,
                    port: port_of(s.w, s.shape),
                    real: true,
                })
                .collect(),
            vrank: rank,
            chains: vec![Vec::new(); edges.len()],
            label_vertex: vec![None; edges.len()],
            up: Vec::new(),
            down: Vec::new(),
            layers_n: 0,
        };
        let mut bends = 0usize;
        for &i in laid {
            let (a, b) = oriented[i];
            let (ra, rb) = (g.vrank[a], g.vrank[b]);
            if bends + (rb - ra) > BEND_BUDGET {
                // Past the budget an edge is drawn straight, over whatever lies between.
                g.chains[i] = vec![a, b];
                continue;
            }
            bends += rb - ra - 1;
            g.chains[i] = g.bend_points(i, a, b, edges[i].label);
        }
        g.link(laid);
        g.layers_n = g.vrank.iter().max().map_or(0, |m| m + 1);
        g
    }

    /// The chain of edge `i` from `a` down to `b`, a new vertex on every rank between.
    fn bend_points(
        &mut self,
        i: usize,
        a: usize,
        b: usize,
        label: Option<(f64, f64)>,
    ) -> Vec<usize> {
        let (ra, rb) = (self.vrank[a], self.vrank[b]);
        let mut mid = ra + (rb - ra) / 2;
        if (mid - ra) % 2 == 0 && mid > ra + 1 {
            mid -= 1;
        }
        let mut chain = vec![a];
        for r in ra + 1..rb {
            let v = self.verts.len();
            let (w, h, port) = match label {
                Some((lw, lh)) if r == mid => {
                    self.label_vertex[i] = Some(v);
                    let w = lw + 2.0 * LABEL_PAD;
                    (w, lh, -w / 2.0)
                }
                _ => (0.0, 0.0, 0.0),
            };
            self.verts.push(Vertex {
                w,
                h,
                port,
                real: false,
            });
            self.vrank.push(r);
            chain.push(v);
        }
        chain.push(b);
        chain
    }

    /// Links along every chain cut into bend points (an edge drawn straight past the
    /// budget has none), heavier between bend points so that long edges run straight.
    fn link(&mut self, laid: &[usize]) {
        let nv = self.verts.len();
        self.up = vec![Vec::new(); nv];
        self.down = vec![Vec::new(); nv];
        for &i in laid {
            let chain = &self.chains[i];
            if chain.len() == 2 && self.vrank[chain[1]] > self.vrank[chain[0]] + 1 {
                continue;
            }
            for pair in chain.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let weight = match (self.verts[a].real, self.verts[b].real) {
                    (false, false) => 8.0,
                    (true, true) => 1.0,
                    _ => 2.0,
                };
                self.down[a].push((b, weight));
                self.up[b].push((a, weight));
            }
        }
    }

    /// Each vertex's x in `layer` packed from 0 at the order's gaps.
    fn offsets(&self, layer: &[usize]) -> Vec<f64> {
        let mut offsets = Vec::with_capacity(layer.len());
        let mut at = 0.0;
        for (i, &v) in layer.iter().enumerate() {
            if i > 0 {
                let p = layer[i - 1];
                at +=
                    (self.verts[p].w + self.verts[v].w) / 2.0 + gap(&self.verts[p], &self.verts[v]);
            }
            offsets.push(at);
        }
        offsets
    }

    /// Where each vertex of `layer` wants to be, and how strongly: at the weighted mean of
    /// its neighbours' ports above (`which` 0), below (1) or both (2); a vertex nothing
    /// pulls keeps close to its left neighbour, weakly.
    fn wanted(&self, layer: &[usize], which: usize, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let verts = &self.verts;
        let mut want = Vec::with_capacity(layer.len());
        let mut weight = Vec::with_capacity(layer.len());
        for &v in layer {
            let mut sum = 0.0;
            let mut total = 0.0;
            let mut add = |list: &[(usize, f64)]| {
                for &(u, w) in list {
                    sum += w * (x[u] + verts[u].port);
                    total += w;
                }
            };
            match which {
                0 => add(&self.up[v]),
                1 => add(&self.down[v]),
                _ => {
                    add(&self.up[v]);
                    add(&self.down[v]);
                }
            }
            if total > 0.0 {
                want.push(sum / total - verts[v].port);
                weight.push(total);
            } else {
                let i = want.len();
                let close = match i.checked_sub(1).map(|p| layer[p]) {
                    Some(p) => x[p] + (verts[p].w + verts[v].w) / 2.0 + gap(&verts[p], &verts[v]),
                    None => x[v],
                };
                want.push(close);
                weight.push(0.05);
            }
        }
        (want, weight)
    }
}

/// The least gap between neighbours in a layer: narrower between bend points.
fn gap(a: &Vertex, b: &Vertex) -> f64 {
    match (a.real, b.real) {
        (true, true) => NODE_GAP,
        (false, false) => DUMMY_GAP,
        _ => (NODE_GAP + DUMMY_GAP) / 2.0,
    }
}

/// The order with the fewest crossings found so far.
struct Best {
    layers: Vec<Vec<usize>>,
    count: usize,
}

impl Best {
    fn offer(&mut self, layers: &[Vec<usize>], count: usize) {
        if count < self.count {
            self.count = count;
            self.layers = layers.to_vec();
        }
    }
}

fn index(layers: &[Vec<usize>], pos: &mut [usize]) {
    for layer in layers {
        for (i, &v) in layer.iter().enumerate() {
            pos[v] = i;
        }
    }
}

/// The order of every layer: a depth-first walk down from the top layers (children in
/// their order, then in reverse: two starts; small graphs also try starts shuffled by a
/// fixed seed, the same every time), each improved by sweeps; the order with fewest
/// crossings kept.
fn order(g: &Layered) -> Best {
    let nv = g.verts.len();
    let mut pos = vec![0usize; nv];
    let mut best = Best {
        layers: Vec::new(),
        count: usize::MAX,
    };
    let tries = match nv {
        0..=300 => 32,
        301..=600 => 8,
        _ => 2,
    };
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for start in 0..tries {
        let mut shuffle: Vec<u64> = (0..nv)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            })
            .collect();
        if start < 2 {
            shuffle = (0..nv as u64).collect();
        }
        let mut layers = depth_first_order(g, start, &shuffle);
        index(&layers, &mut pos);
        let count = crossings(&layers, &g.down, &pos);
        best.offer(&layers, count);
        sweep(g, &mut layers, &mut pos, count, &mut best);
        if nv > LARGE {
            break;
        }
    }
    best
}

/// The layers as a depth-first walk down from each vertex in rank order meets them: start
/// 0 takes vertices and children in their order, start 1 in reverse, later starts by
/// `shuffle`.
fn depth_first_order(g: &Layered, start: usize, shuffle: &[u64]) -> Vec<Vec<usize>> {
    let nv = g.verts.len();
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); g.layers_n];
    let mut seen = vec![false; nv];
    let mut starts: Vec<usize> = (0..nv).collect();
    starts.sort_by_key(|&v| {
        (
            g.vrank[v],
            if start == 1 {
                (nv - v) as u64
            } else {
                shuffle[v]
            },
        )
    });
    for s in starts {
        if seen[s] {
            continue;
        }
        let mut stack = vec![s];
        while let Some(v) = stack.pop() {
            if seen[v] {
                continue;
            }
            seen[v] = true;
            layers[g.vrank[v]].push(v);
            let mut children: Vec<usize> = g.down[v].iter().rev().map(|&(w, _)| w).collect();
            if start == 1 {
                children.reverse();
            } else if start > 1 {
                children.sort_by_key(|&w| shuffle[w]);
            }
            stack.extend(children.into_iter().filter(|&w| !seen[w]));
        }
    }
    layers
}

/// Barycenter sweeps, down and up in turn, each followed by adjacent swaps (on graphs up
/// to [`LARGE`]), until `patience` sweeps bring no improvement on `count`; every order
/// better than `best` replaces it.
fn sweep(g: &Layered, layers: &mut [Vec<usize>], pos: &mut [usize], count: usize, best: &mut Best) {
    let nv = g.verts.len();
    let (sweeps, patience) = if nv > LARGE { (4, 2) } else { (24, 6) };
    let mut last_better = 0;
    let mut run_best = count;
    for round in 0..sweeps {
        if best.count == 0 {
            break;
        }
        let downward = round % 2 == 0;
        let order: Vec<usize> = if downward {
            (1..g.layers_n).collect()
        } else {
            (0..g.layers_n.saturating_sub(1)).rev().collect()
        };
        let nbrs = if downward { &g.up } else { &g.down };
        for l in order {
            barycenter(&mut layers[l], nbrs, pos);
        }
        if nv <= LARGE {
            transpose(layers, pos, &g.up, &g.down);
        }
        let count = crossings(layers, &g.down, pos);
        best.offer(layers, count);
        if count < run_best {
            run_best = count;
            last_better = round;
        } else if round - last_better >= patience {
            break;
        }
    }
}

/// Sorts `layer` by the weighted mean position of each vertex's neighbours in `nbrs` (a
/// vertex without any keeps its own), ties in the current order.
fn barycenter(layer: &mut Vec<usize>, nbrs: &[Vec<(usize, f64)>], pos: &mut [usize]) {
    let mut keyed: Vec<(f64, usize, usize)> = layer
        .iter()
        .map(|&v| {
            let (sum, total) = nbrs[v]
                .iter()
                .fold((0.0, 0.0), |(s, t), &(u, w)| (s + w * pos[u] as f64, t + w));
            let key = if total > 0.0 {
                sum / total
            } else {
                pos[v] as f64
            };
            (key, pos[v], v)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    *layer = keyed.into_iter().map(|k| k.2).collect();
    for (i, &v) in layer.iter().enumerate() {
        pos[v] = i;
    }
}

/// X coordinates: each vertex pulled to its neighbours' ports (above, below, both, in
/// turn), the order's gaps kept; then all shifted so that the leftmost edge is at the
/// margin.
fn x_coordinates(g: &Layered, layers: &[Vec<usize>]) -> Vec<f64> {
    let nv = g.verts.len();
    let mut x = vec![0.0f64; nv];
    for layer in layers {
        for (&v, at) in layer.iter().zip(g.offsets(layer)) {
            x[v] = at;
        }
    }
    let passes = if nv > LARGE { 8 } else { 60 };
    for pass in 0..passes {
        let which = pass % 3;
        let order: Vec<usize> = if which == 1 {
            (0..g.layers_n).rev().collect()
        } else {
            (0..g.layers_n).collect()
        };
        for l in order {
            let layer = &layers[l];
            let (want, weight) = g.wanted(layer, which, &x);
            let placed = isotonic(&want, &weight, &g.offsets(layer));
            for (i, &v) in layer.iter().enumerate() {
                x[v] = placed[i];
            }
        }
    }
    let left = (0..nv)
        .map(|v| x[v] - g.verts[v].w / 2.0)
        .fold(f64::INFINITY, f64::min);
    let shift = if left.is_finite() { MARGIN - left } else { 0.0 };
    for xv in &mut x {
        *xv += shift;
    }
    x
}

/// Each layer's centre line, each layer as tall as its tallest vertex; and the y past the
/// last layer and its gap.
fn layer_centres(g: &Layered, layers: &[Vec<usize>]) -> (Vec<f64>, f64) {
    let mut layer_y = vec![0.0f64; g.layers_n];
    let mut top = MARGIN;
    for (l, layer) in layers.iter().enumerate() {
        let h = layer.iter().map(|&v| g.verts[v].h).fold(0.0, f64::max);
        layer_y[l] = top + h / 2.0;
        top += h + LAYER_GAP;
    }
    (layer_y, top)
}

/// The vertices placed, to draw the edges through.
struct Coords<'a> {
    nodes: &'a [NodeSpec],
    g: &'a Layered,
    x: &'a [f64],
    layer_y: &'a [f64],
}

impl Coords<'_> {
    fn centre(&self, v: usize) -> (f64, f64) {
        (self.x[v], self.layer_y[self.g.vrank[v]])
    }

    fn port(&self, v: usize) -> (f64, f64) {
        let (x, y) = self.centre(v);
        (x + self.g.verts[v].port, y)
    }

    /// Where a line from vertex `v` towards `toward` leaves it: a node's boundary, a
    /// bend point's or an anchor's port.
    fn clip(&self, v: usize, toward: (f64, f64)) -> (f64, f64) {
        match self.nodes.get(v) {
            Some(&s) if s.shape != Shape::Anchor => clip_to_shape(s, self.centre(v), toward),
            _ => self.port(v),
        }
    }

    /// Edge `i` through its bend points, clipped to the shapes at both ends (drawn the
    /// right way when the layout turned it round); a loop goes round its node's right side.
    fn edge_path(&self, i: usize, e: &EdgeSpec, reversed: bool) -> EdgePath {
        let n = self.nodes.len();
        if e.from >= n || e.to >= n {
            return EdgePath {
                points: Vec::new(),
                label: None,
            };
        }
        if e.from == e.to {
            // A loop on the node's right side, its label beyond it.
            let (cx, cy) = self.centre(e.from);
            let right = cx + self.nodes[e.from].w / 2.0;
            let points = vec![
                (right, cy - 6.0),
                (right + 22.0, cy - 6.0),
                (right + 22.0, cy + 6.0),
                (right, cy + 6.0),
            ];
            let label = e.label.map(|(_, lh)| (right + 26.0, cy - lh / 2.0));
            return EdgePath { points, label };
        }
        let chain = &self.g.chains[i];
        let (first, last) = (chain[0], chain[chain.len() - 1]);
        let mut points: Vec<(f64, f64)> = chain[1..chain.len() - 1]
            .iter()
            .map(|&v| self.port(v))
            .collect();
        let first_toward = points.first().copied().unwrap_or(self.centre(last));
        let last_toward = points.last().copied().unwrap_or(self.centre(first));
        points.insert(0, self.clip(first, first_toward));
        points.push(self.clip(last, last_toward));
        if reversed {
            points.reverse();
        }
        let label = self.g.label_vertex[i].map(|v| {
            let vert = &self.g.verts[v];
            (
                self.x[v] - vert.w / 2.0 + LABEL_PAD,
                self.centre(v).1 - vert.h / 2.0,
            )
        });
        EdgePath { points, label }
    }

    /// The drawing's width: past every vertex, edge point and label, and the margin.
    fn width(&self, edges: &[EdgeSpec], paths: &[EdgePath]) -> f64 {
        let verts = &self.g.verts;
        let mut width = (0..verts.len())
            .map(|v| self.x[v] + verts[v].w / 2.0)
            .fold(0.0, f64::max)
            + MARGIN;
        for p in paths {
            for &(px, _) in &p.points {
                width = width.max(px + MARGIN);
            }
        }
        for (e, p) in edges.iter().zip(paths) {
            if let (Some((lw, _)), Some((lx, _))) = (e.label, p.label) {
                width = width.max(lx + lw + MARGIN);
            }
        }
        width
    }
}

/// Where a ray from the centre `c` of a node shaped `s` towards `toward` leaves its
/// boundary (a rectangle, a pill or a circle).
fn clip_to_shape(s: NodeSpec, (cx, cy): (f64, f64), toward: (f64, f64)) -> (f64, f64) {
    let (dx, dy) = (toward.0 - cx, toward.1 - cy);
    match s.shape {
        Shape::Anchor => (cx + port_of(s.w, s.shape), cy),
        Shape::Circle => {
            let len = (dx * dx + dy * dy).sqrt();
            if len < 1e-9 {
                return (cx, cy + s.h / 2.0);
            }
            let r = s.w.min(s.h) / 2.0;
            (cx + dx / len * r, cy + dy / len * r)
        }
        Shape::Pill => {
            let (hw, hh) = (s.w / 2.0, s.h / 2.0);
            let side = hw - hh;
            // Through the flat top or bottom when that is where the ray leaves.
            if dy.abs() > 1e-9 {
                let k = hh / dy.abs();
                if (dx * k).abs() <= side {
                    return (cx + dx * k, cy + dy.signum() * hh);
                }
            }
            // Otherwise through an end's half circle: from its centre towards `toward`.
            let ex = cx + dx.signum() * side;
            let (fx, fy) = (toward.0 - ex, toward.1 - cy);
            let len = (fx * fx + fy * fy).sqrt();
            if len < 1e-9 {
                return (ex + dx.signum() * hh, cy);
            }
            (ex + fx / len * hh, cy + fy / len * hh)
        }
        Shape::Rect => {
            let (hw, hh) = (s.w / 2.0, s.h / 2.0);
            if dx.abs() < 1e-9 && dy.abs() < 1e-9 {
                return (cx, cy + hh);
            }
            if dy.abs() * hw > dx.abs() * hh {
                let k = hh / dy.abs();
                (cx + dx * k, cy + dy.signum() * hh)
            } else {
                let k = hw / dx.abs();
                (cx + dx.signum() * hw, cy + dy * k)
            }
        }
    }
}

/// The edges a depth-first search from the first node (then from each node not reached yet),
/// following edges in their order, finds going back to a node on its stack: turned round,
/// they leave no cycle.
pub fn back_edges(n: usize, edges: &[(usize, usize)]) -> Vec<bool> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &(a, b)) in edges.iter().enumerate() {
        if a != b && a < n && b < n {
            out[a].push(i);
        }
    }
    let mut reversed = vec![false; edges.len()];
    let mut state = vec![0u8; n];
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        state[root] = 1;
        let mut stack = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&e) = out[v].get(*next) {
                *next += 1;
                let w = edges[e].1;
                match state[w] {
                    0 => {
                        state[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => reversed[e] = true,
                    _ => {}
                }
            } else {
                state[v] = 2;
                stack.pop();
            }
        }
    }
    reversed
}

/// Crossings between consecutive layers: edges sorted by their upper end, inversions of
/// their lower ends counted with a Fenwick tree.
fn crossings(layers: &[Vec<usize>], down: &[Vec<(usize, f64)>], pos: &[usize]) -> usize {
    let mut total = 0;
    for l in 0..layers.len().saturating_sub(1) {
        let size = layers[l + 1].len();
        let mut ends: Vec<(usize, usize)> = Vec::new();
        for &v in &layers[l] {
            for &(w, _) in &down[v] {
                ends.push((pos[v], pos[w]));
            }
        }
        ends.sort_unstable();
        let mut tree = vec![0usize; size + 1];
        for (seen, &(_, b)) in ends.iter().enumerate() {
            // Earlier edges whose lower end is right of b cross this one.
            let mut i = b + 1;
            let mut not_right = 0;
            while i > 0 {
                not_right += tree[i];
                i -= i & i.wrapping_neg();
            }
            total += seen - not_right;
            let mut i = b + 1;
            while i <= size {
                tree[i] += 1;
                i += i & i.wrapping_neg();
            }
        }
    }
    total
}

/// Swaps neighbours in a layer while that removes crossings with both adjacent layers.
fn transpose(
    layers: &mut [Vec<usize>],
    pos: &mut [usize],
    up: &[Vec<(usize, f64)>],
    down: &[Vec<(usize, f64)>],
) {
    let pair = |a: usize, b: usize, pos: &[usize]| -> usize {
        let mut c = 0;
        for nbrs in [up, down] {
            for &(p, _) in &nbrs[a] {
                for &(q, _) in &nbrs[b] {
                    if pos[p] > pos[q] {
                        c += 1;
                    }
                }
            }
        }
        c
    };
    for _ in 0..8 {
        let mut improved = false;
        for layer in layers.iter_mut() {
            for i in 0..layer.len().saturating_sub(1) {
                let (a, b) = (layer[i], layer[i + 1]);
                if pair(a, b, pos) > pair(b, a, pos) {
                    layer.swap(i, i + 1);
                    pos[a] = i + 1;
                    pos[b] = i;
                    improved = true;
                }
            }
        }
        if !improved {
            break;
        }
    }
}

/// The positions closest (weighted least squares) to `want` that keep each one at least
/// `offsets[i] - offsets[i-1]` right of the one before: pool-adjacent-violators on
/// `want - offsets`.
fn isotonic(want: &[f64], weight: &[f64], offsets: &[f64]) -> Vec<f64> {
    // Blocks of (total weight, weighted sum, length).
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(want.len());
    for i in 0..want.len() {
        let mut block = (weight[i], weight[i] * (want[i] - offsets[i]), 1usize);
        while let Some(&last) = blocks.last() {
            if last.1 / last.0 >= block.1 / block.0 {
                blocks.pop();
                block = (last.0 + block.0, last.1 + block.1, last.2 + block.2);
            } else {
                break;
            }
        }
        blocks.push(block);
    }
    let mut out = Vec::with_capacity(want.len());
    for (w, s, len) in blocks {
        for _ in 0..len {
            let i = out.len();
            out.push(s / w + offsets[i]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(w: f64) -> NodeSpec {
        NodeSpec {
            w,
            h: 30.0,
            shape: Shape::Rect,
        }
    }

    fn edge(from: usize, to: usize) -> EdgeSpec {
        EdgeSpec {
            from,
            to,
            label: None,
        }
    }

    #[test]
    fn a_long_chain_with_a_loop_back_from_every_node_is_laid_out_within_the_bend_budget() {
        // 3,000 nodes in a row, each also routed back to the first: ~9 million bend
        // points uncut; at most the budget here, and every edge still ends on its nodes.
        let n = 3000;
        let nodes = vec![node(40.0); n];
        let mut edges: Vec<EdgeSpec> = (1..n).map(|i| edge(i - 1, i)).collect();
        edges.extend((1..n).map(|i| edge(i, 0)));
        let placed = layout(&nodes, &edges);
        assert_eq!(placed.edges.len(), edges.len());
        for (e, p) in edges.iter().zip(&placed.edges) {
            let (first, last) = (p.points[0], *p.points.last().unwrap());
            let near = |q: (f64, f64), v: usize| {
                let (x, y) = placed.nodes[v];
                (q.0 - x).abs() <= 20.0 + 1e-6 && (q.1 - y).abs() <= 15.0 + 1e-6
            };
            assert!(near(first, e.from) && near(last, e.to));
        }
    }

    #[test]
    fn isotonic_keeps_the_gaps_and_is_exact_without_conflict() {
        assert_eq!(
            isotonic(&[0.0, 100.0], &[1.0, 1.0], &[0.0, 10.0]),
            [0.0, 100.0]
        );
        // Both want 50: they share the difference.
        assert_eq!(
            isotonic(&[50.0, 50.0], &[1.0, 1.0], &[0.0, 20.0]),
            [40.0, 60.0]
        );
    }

    #[test]
    fn a_crossing_that_an_order_can_undo_is_undone() {
        // 0 -> {1, 2}; 1 -> 4, 2 -> 3: the first order crosses 1-4 and 2-3.
        let nodes = vec![node(40.0); 5];
        let edges = vec![edge(0, 1), edge(0, 2), edge(1, 4), edge(2, 3)];
        let placed = layout(&nodes, &edges);
        assert_eq!(placed.crossings, 0);
        let x = |i: usize| placed.nodes[i].0;
        assert_eq!(x(1) < x(2), x(4) < x(3), "{:?}", placed.nodes);
    }

    #[test]
    fn a_cycle_is_drawn_with_its_back_edge_going_up() {
        let nodes = vec![node(40.0); 3];
        let edges = vec![edge(0, 1), edge(1, 2), edge(2, 1)];
        let placed = layout(&nodes, &edges);
        let back = &placed.edges[2].points;
        assert!(back.first().unwrap().1 > back.last().unwrap().1, "{back:?}");
        // Ends on the boundaries of 2 (bottom) and 1 (top).
        let (x1, y1) = placed.nodes[1];
        let (x2, y2) = placed.nodes[2];
        let on_boundary = |p: (f64, f64), c: (f64, f64)| {
            ((p.0 - c.0).abs() - 20.0).abs() < 1e-6 || ((p.1 - c.1).abs() - 15.0).abs() < 1e-6
        };
        assert!(on_boundary(back[0], (x2, y2)), "{back:?}");
        assert!(on_boundary(*back.last().unwrap(), (x1, y1)), "{back:?}");
    }
}
