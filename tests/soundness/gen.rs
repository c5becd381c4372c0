//! A seeded generator of random workflows (source text, prompt templates and scripted
//! replies) for the soundness property in `tests/soundness.rs`.
//!
//! The generator keeps its own model of the workflow it writes (types, roles, routes)
//! so it can compute which roles have definitely produced a valid output before each
//! role, and read only those unless a feature asks for reads `check` must reject.

use std::collections::BTreeSet;
use std::fmt::Write;

use serde_json::{Value, json};

/// SplitMix64: tiny, seedable, and the same on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Which parts of the final design the generator may use. On a branch without a
/// feature, switch it off; after the merge every switch is on ([`Features::FINAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Emit `X -> ... when X.invalid` for every json llm role (built-in exit
    /// `invalid_output`, handler roles, `X.invalid_reply`).
    pub invalid_routes: bool,
    /// Draw last-attempt replies from the invalid family (prose, wrong types, missing
    /// fields, `[]`, `null`, empty string). Earlier attempts may always be invalid.
    pub invalid_replies: bool,
    /// Draw replies from the near-valid family (lenient coercion).
    pub coercion: bool,
    /// The `??` operator.
    pub coalesce: bool,
    /// Constructs that are sound only once the section-1 holes are closed: absent
    /// optional fields in replies, unguarded reads of optional fields in templates,
    /// reads of roles that may not have run, misspelt template fields, an optional
    /// value into a non-optional memory item, reading a map's output after an empty map.
    /// `check` must reject the unsound ones and the run must survive the rest.
    pub holes_fixed: bool,
    /// `set m = e` type-checks that `e` fits `m` (today `check` only asks whether the
    /// two types are comparable, so a float passes into an int memory item).
    pub assignable_set: bool,
    /// Artifact names built from model output (`"named/{{ r1.name }}.txt"`); a reply
    /// `../up` ended the run at `error` (finding 4) until values in artifact names were
    /// made path-safe.
    pub model_artifact_names: bool,
    /// Issue 22 §3, the map join: a map worker read by name at its join (and after) is the
    /// list of its branch outputs: loops over it, `extend` with it, `len` of it; json
    /// workers; rarely `append` of it or a field of the list, which `check` must reject.
    pub map_join_list: bool,
    /// Issue 22 §3, names that exist only sometimes: `item` guarded in roles that are not
    /// map workers (and rarely unguarded, or in an expression: rejected), `{% set %}` in
    /// one branch of an `{% if %}` read guarded (rarely unguarded: rejected).
    pub sometimes_names: bool,
    /// Issue 22 §3, values from a reply: `map[any]` fields whose values go into
    /// arithmetic, `len`, stores into narrower memory and template reads — in the replying
    /// role's update (an invalid attempt) and in later roles (`invalid_output`).
    pub reply_values: bool,
    /// Issue 22 §3, scripted replies that run out: a role left out of the replies (the run
    /// is refused before it starts, unless the script names it in `unreached`: then a run
    /// that reaches it ends at `limit`) or given replies for its first visits only (`limit`).
    pub scripted_gaps: bool,
    /// Issue 22 §3, templates on values of a kind they need: loops, filters, arithmetic,
    /// comparisons, `~` and `in` over a reply's `map[any]` values (a wrong kind ends the
    /// run at `invalid_output`) and over declared fields (rarely of a type they cannot
    /// take, or optional unguarded: `check` must reject them).
    pub template_kinds: bool,
    /// Issue 22 §3, maps the workflow fills itself (`tally: map[int]`, `seen: map[any]`)
    /// read by key in templates and expressions, and a list read at a computed index:
    /// guarded (rarely not: rejected).
    pub memory_maps: bool,
    /// Issue 22 §3, `item` in a map worker's expressions has the type of the list's items:
    /// stored into a string slot, measured (rarely stored as an int: rejected).
    pub item_typed: bool,
}

impl Features {
    /// What the current language supports (before the issue-10 branches are merged).
    pub const CURRENT: Features = Features {
        invalid_routes: false,
        invalid_replies: false,
        coercion: false,
        coalesce: false,
        holes_fixed: false,
        assignable_set: false,
        model_artifact_names: false,
        map_join_list: false,
        sometimes_names: false,
        reply_values: false,
        scripted_gaps: false,
        template_kinds: false,
        memory_maps: false,
        item_typed: false,
    };
    /// The final design of issue 10.
    pub const FINAL: Features = Features {
        invalid_routes: true,
        invalid_replies: true,
        coercion: true,
        coalesce: true,
        holes_fixed: true,
        assignable_set: true,
        model_artifact_names: true,
        map_join_list: true,
        sometimes_names: true,
        reply_values: true,
        scripted_gaps: true,
        template_kinds: true,
        memory_maps: true,
        item_typed: true,
    };

    /// `current`, `final`, or a comma list of switches (`invalid_routes,coercion`).
    pub fn parse(text: &str) -> Result<Features, String> {
        match text.trim() {
            "current" => return Ok(Features::CURRENT),
            "final" => return Ok(Features::FINAL),
            _ => {}
        }
        let mut f = Features::CURRENT;
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "invalid_routes" => f.invalid_routes = true,
                "invalid_replies" => f.invalid_replies = true,
                "coercion" => f.coercion = true,
                "coalesce" => f.coalesce = true,
                "holes_fixed" => f.holes_fixed = true,
                "assignable_set" => f.assignable_set = true,
                "model_artifact_names" => f.model_artifact_names = true,
                "map_join_list" => f.map_join_list = true,
                "sometimes_names" => f.sometimes_names = true,
                "reply_values" => f.reply_values = true,
                "scripted_gaps" => f.scripted_gaps = true,
                "template_kinds" => f.template_kinds = true,
                "memory_maps" => f.memory_maps = true,
                "item_typed" => f.item_typed = true,
                other => return Err(format!("unknown feature `{other}`")),
            }
        }
        Ok(f)
    }
}

#[derive(Debug, Clone)]
pub enum Ty {
    Str,
    Int,
    Float,
    Bool,
    Lit(Vec<String>),
    MapAny,
    List(Box<Ty>),
    Obj(Vec<Field>),
    /// A named type: written as its name, behaves as the inner type.
    Named(String, Box<Ty>),
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub ty: Ty,
    pub opt: bool,
}

impl Ty {
    fn render(&self) -> String {
        match self {
            Ty::Str => "string".into(),
            Ty::Int => "int".into(),
            Ty::Float => "float".into(),
            Ty::Bool => "bool".into(),
            Ty::Lit(m) => m
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(" | "),
            Ty::MapAny => "map[any]".into(),
            Ty::List(i) => format!("list[{}]", i.render()),
            Ty::Obj(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        format!(
                            "{}: {}{}",
                            f.name,
                            f.ty.render(),
                            if f.opt { "?" } else { "" }
                        )
                    })
                    .collect();
                format!("{{ {} }}", parts.join(", "))
            }
            Ty::Named(n, _) => n.clone(),
        }
    }
    fn resolved(&self) -> &Ty {
        match self {
            Ty::Named(_, inner) => inner.resolved(),
            t => t,
        }
    }
    fn fields(&self) -> &[Field] {
        match self.resolved() {
            Ty::Obj(f) => f,
            _ => &[],
        }
    }
    fn is_stringy(&self) -> bool {
        matches!(self.resolved(), Ty::Str | Ty::Lit(_))
    }
    fn is_scalar(&self) -> bool {
        matches!(
            self.resolved(),
            Ty::Str | Ty::Int | Ty::Float | Ty::Bool | Ty::Lit(_)
        )
    }
}

#[derive(Debug, Clone)]
pub enum Kind {
    Json(Ty),
    Text,
    Tool,
    Builtin,
}

#[derive(Debug, Clone)]
pub struct Role {
    pub name: String,
    pub kind: Kind,
    pub retries: u64,
    pub max_visits: Option<u64>,
    /// A map worker sees `item`.
    pub worker: bool,
    argv: Vec<String>,
    /// `call = R.f` and `args = R.g`: the tool an llm role chose.
    call: Option<(String, String)>,
    reads: BTreeSet<&'static str>,
    updates: Vec<String>,
    template: String,
    system: Option<String>,
    artifacts: Vec<String>,
}

#[derive(Debug, Clone)]
enum Target {
    Node(String),
    Parallel(Vec<String>, String),
    Map(String, String, String),
}

#[derive(Debug, Clone)]
enum Cond {
    Always,
    When(String),
    Otherwise,
    Invalid,
}

#[derive(Debug, Clone)]
struct Route {
    from: String,
    target: Target,
    cond: Cond,
    max: Option<u64>,
    backtrack: bool,
}

/// A graph edge for the definite-output analysis: from (None = start), to, the roles it
/// establishes, the roles it removes (an invalid route removes its source).
type Edge = (Option<usize>, usize, Vec<usize>, Vec<usize>);

/// One generated case: the files to write and the replies to script.
#[derive(Debug, Clone)]
pub struct Case {
    pub seed: u64,
    pub source: String,
    /// (file name, text) under `prompts/`.
    pub prompts: Vec<(String, String)>,
    /// (role, visit, replies for attempt 1, 2, ...); `visit` None = every other visit.
    pub replies: Vec<(String, Option<u64>, Vec<String>)>,
    /// Llm roles left out of the replies on purpose: the run is refused at its start unless
    /// the script names them in `unreached`, and a run that reaches one then ends at `limit`.
    pub omitted: Vec<String>,
    /// Omitted roles the script says the run does not reach (`unreached: [...]`).
    pub unreached: Vec<String>,
}

const FIELD_NAMES: &[&str] = &[
    "name", "title", "score", "count", "done", "kind", "tags", "steps", "note", "reason", "level",
    "id", "answer", "items", "meta",
];
const WORDS: &[&str] = &[
    "yes",
    "no",
    "alpha",
    "beta",
    "hello world",
    "",
    "stop",
    "done",
    "42",
    "é✓ ünï",
    "he said \"hi\"",
    "line\nbreak",
    "{{ not a template }}",
    "a/b",
    "../up",
    "{% raw %}",
];
const LITS: &[&str] = &["todo", "done", "stop", "add_step", "fail", "ok", "retry"];

const TOOLS: &str = r#"
tool t_echo {
  executable = "echo"
  usage = "t_echo: prints its argument. args: {\"text\": \"hi\"}"
  timeout = 10s
  input { text: string }
}

tool t_true {
  executable = "true"
  usage = "t_true: does nothing. args: {}"
  timeout = 10s
  input { n: int? }
}
"#;

/// The decision of a tool-using llm role (micro-agent's shape, flattened).
fn decision_type(rng: &mut Rng) -> Ty {
    let tool = if rng.chance(0.5) {
        Ty::Str
    } else {
        Ty::Lit(vec!["t_echo".into(), "t_true".into(), "nope".into()])
    };
    Ty::Obj(vec![
        Field {
            name: "tool".into(),
            ty: tool,
            opt: false,
        },
        Field {
            name: "args".into(),
            ty: Ty::MapAny,
            opt: false,
        },
        Field {
            name: "note".into(),
            ty: Ty::Str,
            opt: rng.chance(0.5),
        },
    ])
}

struct Memory {
    /// name, type text, initial value text
    items: Vec<(&'static str, String, String)>,
    /// `plan: list[T]` holds items of this named object type.
    plan: Option<(String, Ty)>,
}

impl Memory {
    fn has(&self, name: &str) -> bool {
        self.items.iter().any(|(n, _, _)| *n == name)
    }
}

pub struct Gen<'r> {
    rng: &'r mut Rng,
    f: Features,
    named: Vec<(String, Ty)>,
    roles: Vec<Role>,
    routes: Vec<Route>,
    exits: Vec<(String, i32, Option<String>)>,
    memory: Memory,
    partials: Vec<(String, String, Vec<&'static str>)>,
    has_invalid_exit: bool,
    max_steps: u64,
    /// Issue 27 §4: every other case bounds its inputs and value memory, so the proven
    /// worst case of its prompts needs no cap (drawn from the seed, not the generator's
    /// stream, so every case is otherwise the same).
    size_limits: bool,
    seed: u64,
}

pub fn generate(seed: u64, features: Features) -> Case {
    let mut rng = Rng::new(seed);
    let mut g = Gen {
        rng: &mut rng,
        f: features,
        named: Vec::new(),
        roles: Vec::new(),
        routes: Vec::new(),
        exits: Vec::new(),
        memory: Memory {
            items: Vec::new(),
            plan: None,
        },
        partials: Vec::new(),
        has_invalid_exit: false,
        max_steps: 60,
        size_limits: seed.is_multiple_of(2),
        seed,
    };
    g.build();
    let (replies, omitted) = g.replies();
    let unreached = omitted
        .iter()
        .filter(|_| g.rng.chance(0.6))
        .cloned()
        .collect();
    let (source, prompts) = g.render();
    Case {
        seed,
        source,
        prompts,
        replies,
        omitted,
        unreached,
    }
}

impl Gen<'_> {
    fn build(&mut self) {
        // Types.
        for i in 0..self.rng.below(4) {
            let ty = if self.rng.chance(0.3) {
                Ty::Lit(self.lits())
            } else {
                self.obj(0)
            };
            let name = if matches!(ty, Ty::Lit(_)) {
                format!("K{}", i + 1)
            } else {
                format!("T{}", i + 1)
            };
            self.named.push((name, ty));
        }
        if self.rng.chance(0.3) {
            let d = decision_type(self.rng);
            self.named.push(("Decision".into(), d));
        }
        // Memory.
        let menu: [(&'static str, &'static str, &'static str); 8] = [
            ("counter", "int", "0"),
            ("notes", "list[string]", "[]"),
            ("items", "list[string]", "[\"a\", \"b\"]"),
            ("last", "any", "null"),
            ("seen", "map[any]", "{}"),
            ("label", "string", "\"none\""),
            ("maybe_label", "string?", "null"),
            ("tally", "map[int]", "{}"),
        ];
        for m in menu {
            if m.0 == "tally" && !self.f.memory_maps {
                continue;
            }
            if self.rng.chance(0.6) {
                let mut m = m;
                if m.0 == "items" {
                    m.2 = *self.rng.pick(&[
                        "[]",
                        "[\"a\"]",
                        "[\"a\", \"b\"]",
                        "[\"x\", \"y\", \"z\"]",
                    ]);
                }
                self.memory
                    .items
                    .push((m.0, m.1.to_string(), m.2.to_string()));
            }
        }
        let objs: Vec<(String, Ty)> = self
            .named
            .iter()
            .filter(|(_, t)| matches!(t, Ty::Obj(_)))
            .cloned()
            .collect();
        if !objs.is_empty() && self.rng.chance(0.6) {
            let (n, t) = self.rng.pick(&objs).clone();
            self.memory
                .items
                .push(("plan", format!("list[{n}]"), "[]".to_string()));
            self.memory.plan = Some((n, t));
        }
        if self.rng.chance(0.15) {
            self.max_steps = self.rng.range(1, 8);
        }
        // Exits.
        self.exits.push(("done".into(), 0, None));
        if self.rng.chance(0.5) {
            self.exits.push(("failed".into(), 1, None));
        }
        if self.rng.chance(0.3) {
            self.exits.push(("other".into(), 5, None));
        }
        if self.memory.has("notes") && self.rng.chance(0.2) {
            let n = self.rng.range(1, 4);
            self.exits.push((
                "enough".into(),
                6,
                Some(format!("len(memory.notes) >= {n}")),
            ));
        }
        // Partials.
        for i in 0..self.rng.below(3) {
            let (text, reads) = self.partial_text();
            self.partials
                .push((format!("_p{}.tera", i + 1), text, reads));
        }
        // Backbone.
        let n = self.rng.range(1, 5) as usize;
        for i in 0..n {
            let kind = self.kind(false);
            let role = self.role(format!("r{}", i + 1), kind);
            self.roles.push(role);
        }
        for i in 0..n {
            self.routes_from(i, n);
        }
        self.fill();
    }

    fn lits(&mut self) -> Vec<String> {
        let k = self.rng.range(2, 3) as usize;
        let mut out: Vec<String> = Vec::new();
        while out.len() < k {
            let w = self.rng.pick(LITS).to_string();
            if !out.contains(&w) {
                out.push(w);
            }
        }
        out
    }

    fn scalar(&mut self) -> Ty {
        match self.rng.below(9) {
            0..=2 => Ty::Str,
            3 | 4 => Ty::Int,
            5 => Ty::Float,
            6 => Ty::Bool,
            _ => {
                let lit_names: Vec<(String, Ty)> = self
                    .named
                    .iter()
                    .filter(|(_, t)| matches!(t, Ty::Lit(_)))
                    .cloned()
                    .collect();
                if !lit_names.is_empty() && self.rng.chance(0.5) {
                    let (n, t) = self.rng.pick(&lit_names).clone();
                    Ty::Named(n, Box::new(t))
                } else {
                    Ty::Lit(self.lits())
                }
            }
        }
    }

    fn ty(&mut self, depth: usize) -> Ty {
        match self.rng.below(10) {
            0..=5 => self.scalar(),
            6 | 7 => {
                let item = if depth == 0 && self.rng.chance(0.3) {
                    self.obj(depth + 1)
                } else {
                    self.scalar()
                };
                Ty::List(Box::new(item))
            }
            8 if depth == 0 => self.obj(depth + 1),
            _ => {
                let objs: Vec<(String, Ty)> = self
                    .named
                    .iter()
                    .filter(|(_, t)| matches!(t, Ty::Obj(_)))
                    .cloned()
                    .collect();
                if depth == 0 && !objs.is_empty() {
                    let (n, t) = self.rng.pick(&objs).clone();
                    Ty::Named(n, Box::new(t))
                } else {
                    self.scalar()
                }
            }
        }
    }

    fn obj(&mut self, depth: usize) -> Ty {
        let k = self.rng.range(1, 4) as usize;
        let mut fields: Vec<Field> = Vec::new();
        if self.f.reply_values && depth == 0 && self.rng.chance(0.25) {
            // A reply's open parameters, as the LLM-IDE agent's `action_params`.
            fields.push(Field {
                name: "params".into(),
                ty: Ty::MapAny,
                opt: false,
            });
        }
        while fields.len() < k {
            let name = self.rng.pick(FIELD_NAMES).to_string();
            if fields.iter().any(|f| f.name == name) {
                continue;
            }
            let ty = self.ty(depth);
            let opt = self.rng.chance(0.3);
            fields.push(Field { name, ty, opt });
        }
        Ty::Obj(fields)
    }

    fn kind(&mut self, branch: bool) -> Kind {
        self.kind_of(branch, false)
    }

    /// A map worker may be a json role: its invalid branch ends the run at `invalid_output`.
    fn kind_of(&mut self, branch: bool, worker: bool) -> Kind {
        let json_ok = !branch || !self.f.invalid_routes || (worker && self.f.map_join_list);
        match self.rng.below(20) {
            0..=9 if json_ok => {
                let objs: Vec<(String, Ty)> = self
                    .named
                    .iter()
                    .filter(|(_, t)| matches!(t, Ty::Obj(_)))
                    .cloned()
                    .collect();
                let ty = if !objs.is_empty() && self.rng.chance(0.5) {
                    let (n, t) = self.rng.pick(&objs).clone();
                    Ty::Named(n, Box::new(t))
                } else if self.rng.chance(0.1) {
                    Ty::List(Box::new(Ty::Str))
                } else {
                    self.obj(0)
                };
                Kind::Json(ty)
            }
            0..=12 => Kind::Text,
            13..=16 => Kind::Tool,
            _ => Kind::Builtin,
        }
    }

    fn role(&mut self, name: String, kind: Kind) -> Role {
        let retries = if matches!(kind, Kind::Json(_)) {
            self.rng.range(0, 2)
        } else {
            0
        };
        Role {
            name,
            kind,
            retries,
            max_visits: None,
            worker: false,
            argv: Vec::new(),
            call: None,
            reads: BTreeSet::new(),
            updates: Vec::new(),
            template: String::new(),
            system: None,
            artifacts: Vec::new(),
        }
    }

    fn idx(&self, name: &str) -> usize {
        self.roles.iter().position(|r| r.name == name).unwrap()
    }

    /// A map worker, read by name, is the list of its outputs: none of its fields.
    fn worker(&self, j: usize) -> bool {
        self.roles[j].worker
    }

    /// The required `map[any]` field of a json role's output (`params`), if it has one.
    fn params_field(&self, j: usize) -> Option<String> {
        let Kind::Json(ty) = &self.roles[j].kind else {
            return None;
        };
        ty.fields()
            .iter()
            .find(|f| matches!(f.ty.resolved(), Ty::MapAny) && !f.opt)
            .map(|f| f.name.clone())
    }

    fn exit_name(&mut self) -> String {
        let i = if self.rng.chance(0.6) {
            0
        } else {
            self.rng.below(self.exits.len())
        };
        self.exits[i].0.clone()
    }

    fn route(&mut self, from: &str, target: Target, cond: Cond) {
        self.routes.push(Route {
            from: from.to_string(),
            target,
            cond,
            max: None,
            backtrack: false,
        });
    }

    /// The routes out of backbone role `i`: plain, conditional, a bounded loop back, a
    /// parallel or a map route, and the invalid route of a json role.
    fn routes_from(&mut self, i: usize, n: usize) {
        let me = self.roles[i].name.clone();
        let next = if i + 1 < n {
            self.roles[i + 1].name.clone()
        } else {
            self.exit_name()
        };
        let next_is_role = i + 1 < n;
        let start = self.routes.len();
        if i == 0 {
            self.route("start", Target::Node(me.clone()), Cond::Always);
        }
        let invalid_first = self.rng.chance(0.5);
        if invalid_first {
            self.invalid_route(i, &next);
        }
        match self.rng.below(100) {
            0..=29 => self.route(&me, Target::Node(next.clone()), Cond::Always),
            30..=59 => {
                // Exhaustive routing over a literal union field, without `otherwise`.
                if let Some((path, members)) = self.lit_field(i)
                    && self.rng.chance(0.4)
                {
                    for m in members {
                        let t = self.some_target(i, n, &next);
                        self.route(&me, Target::Node(t), Cond::When(format!("{path} == {m:?}")));
                    }
                } else {
                    for _ in 0..self.rng.range(1, 2) {
                        let t = self.some_target(i, n, &next);
                        let c = self.cond(i);
                        self.route(&me, Target::Node(t), Cond::When(c));
                    }
                    self.route(&me, Target::Node(next.clone()), Cond::Otherwise);
                }
            }
            60..=84 => {
                let j = self.rng.below(i + 1);
                let back = self.roles[j].name.clone();
                let k = self.rng.range(1, 3);
                if self.rng.chance(0.2) {
                    // Bounded by the target's max_visits instead of the route.
                    self.roles[j].max_visits = Some(k + 1);
                    let c = self.cond(i);
                    self.route(&me, Target::Node(back), Cond::When(c));
                } else {
                    let cond = if self.rng.chance(0.7) {
                        Cond::When(self.cond(i))
                    } else {
                        Cond::Always
                    };
                    self.routes.push(Route {
                        from: me.clone(),
                        target: Target::Node(back),
                        cond,
                        max: Some(k),
                        backtrack: self.rng.chance(0.3),
                    });
                }
                self.route(&me, Target::Node(next.clone()), Cond::Otherwise);
            }
            85..=92 if next_is_role => {
                let k = self.rng.range(1, 3);
                let mut branches = Vec::new();
                for b in 0..k {
                    let kind = self.kind(true);
                    let name = format!("{me}_b{}", b + 1);
                    let role = self.role(name.clone(), kind);
                    self.roles.push(role);
                    branches.push(name);
                }
                self.route(&me, Target::Parallel(branches, next.clone()), Cond::Always);
            }
            93..=99 if next_is_role && self.memory.has("items") => {
                let kind = self.kind_of(true, true);
                let name = format!("{me}_w");
                let mut role = self.role(name.clone(), kind);
                role.worker = true;
                self.roles.push(role);
                let max = self.rng.range(1, 4);
                self.routes.push(Route {
                    from: me.clone(),
                    target: Target::Map(name, "memory.items".into(), next.clone()),
                    cond: Cond::Always,
                    max: Some(max),
                    backtrack: false,
                });
            }
            _ => self.route(&me, Target::Node(next.clone()), Cond::Always),
        }
        if !invalid_first {
            self.invalid_route(i, &next);
        }
        let _ = start;
    }

    fn some_target(&mut self, i: usize, n: usize, next: &str) -> String {
        match self.rng.below(10) {
            0..=3 => next.to_string(),
            4..=5 if i + 2 < n => self.roles[i + 2].name.clone(),
            _ => self.exit_name(),
        }
    }

    fn invalid_route(&mut self, i: usize, next: &str) {
        if !self.f.invalid_routes || !matches!(self.roles[i].kind, Kind::Json(_)) {
            return;
        }
        let me = self.roles[i].name.clone();
        match self.rng.below(10) {
            0..=3 => {
                self.has_invalid_exit = true;
                self.route(&me, Target::Node("invalid_output".into()), Cond::Invalid);
            }
            shape => {
                let h = format!("{me}_h");
                let mut role = self.role(h.clone(), Kind::Builtin);
                if self.memory.has("notes") && self.f.coalesce && self.rng.chance(0.5) {
                    role.updates.push(format!(
                        "notes.append({me}.invalid_reply.error ?? \"unknown\")"
                    ));
                } else if self.memory.has("last") {
                    role.updates.push(format!("set last = {me}.invalid_reply"));
                }
                self.roles.push(role);
                self.route(&me, Target::Node(h.clone()), Cond::Invalid);
                if shape <= 6 {
                    // Ask again a bounded number of times, then give up.
                    let k = self.rng.range(1, 3);
                    self.routes.push(Route {
                        from: h.clone(),
                        target: Target::Node(me.clone()),
                        cond: Cond::Always,
                        max: Some(k),
                        backtrack: false,
                    });
                    let give_up = if self.rng.chance(0.5) {
                        self.has_invalid_exit = true;
                        "invalid_output".to_string()
                    } else {
                        self.exit_name()
                    };
                    self.route(&h, Target::Node(give_up), Cond::Otherwise);
                } else {
                    // Carry on without the output.
                    self.route(&h, Target::Node(next.to_string()), Cond::Always);
                }
            }
        }
    }

    /// A required literal-union field of a json role's output: (`role.field`, members).
    fn lit_field(&self, i: usize) -> Option<(String, Vec<String>)> {
        let Kind::Json(ty) = &self.roles[i].kind else {
            return None;
        };
        ty.fields().iter().find_map(|f| match f.ty.resolved() {
            Ty::Lit(m) if !f.opt => Some((format!("{}.{}", self.roles[i].name, f.name), m.clone())),
            _ => None,
        })
    }

    /// A condition on role `i`'s own output, memory or visits.
    fn cond(&mut self, i: usize) -> String {
        let c = self.atom(i);
        match self.rng.below(10) {
            0 => format!("{c} and {}", self.atom(i)),
            1 => format!("{c} or {}", self.atom(i)),
            2 => format!("not ({c})"),
            _ => c,
        }
    }

    fn atom(&mut self, i: usize) -> String {
        let me = self.roles[i].name.clone();
        let mut options: Vec<String> = vec![
            format!("visits({me}) > {}", self.rng.range(1, 2)),
            format!("visits({me}) >= input.n"),
        ];
        if self.memory.has("counter") {
            options.push(format!("memory.counter >= {}", self.rng.range(1, 3)));
        }
        if self.memory.has("notes") {
            options.push(format!("len(memory.notes) > {}", self.rng.range(0, 2)));
        }
        if self.f.reply_values
            && let Some(p) = self.params_field(i)
        {
            // `len` of a value typed `any`: a number there ends the run at `invalid_output`.
            options.push(format!("len({me}.{p}.extra) > 1"));
            options.push(format!("len({me}.{p}.text) > 3"));
        }
        match self.roles[i].kind.clone() {
            Kind::Json(ty) => {
                if let Ty::List(_) = ty.resolved() {
                    options.push(format!("len({me}) > 0"));
                }
                for f in ty.fields() {
                    let p = format!("{me}.{}", f.name);
                    if f.opt {
                        options.push(format!("{p} != null"));
                        options.push(format!("{p} == null"));
                        if self.f.holes_fixed && matches!(f.ty.resolved(), Ty::Int | Ty::Float) {
                            options.push(format!("{p} > 1"));
                        }
                        continue;
                    }
                    match f.ty.resolved() {
                        Ty::Bool => {
                            options.push(p.clone());
                            options.push(format!("not {p}"));
                        }
                        Ty::Int | Ty::Float => {
                            options.push(format!("{p} > {}", self.rng.range(0, 50)))
                        }
                        Ty::Str => {
                            options.push(format!("{p} == \"yes\""));
                            options.push(format!("contains({p}, \"a\")"));
                            options.push(format!("len({p}) > 3"));
                        }
                        Ty::Lit(m) => {
                            let m = self.rng.pick(m).clone();
                            options.push(format!("{p} == {m:?}"));
                            options.push(format!("{p} != {m:?}"));
                        }
                        Ty::List(_) => options.push(format!("len({p}) > 0")),
                        Ty::Obj(_) | Ty::Named(..) => options.push(format!("{p} != null")),
                        Ty::MapAny => options.push(format!("len({p}) > 0")),
                    }
                }
            }
            Kind::Text => {
                options.push(format!("contains({me}, \"yes\")"));
                options.push(format!("len({me}) > 5"));
            }
            Kind::Tool => {
                options.push(format!("{me}.ok"));
                options.push(format!("not {me}.ok"));
                options.push(format!("{me}.exit_code == 0"));
                options.push(format!("contains({me}.stdout, \"a\")"));
            }
            Kind::Builtin => {}
        }
        self.rng.pick(&options).clone()
    }

    /// Roles with a definite valid output at each role (by index), on this model's graph.
    fn definite(&self) -> Vec<BTreeSet<usize>> {
        let n = self.roles.len();
        let all: BTreeSet<usize> = (0..n).collect();
        // (from or None for start, to, gen, kill)
        let mut edges: Vec<Edge> = Vec::new();
        for r in &self.routes {
            let from = if r.from == "start" {
                None
            } else {
                Some(self.idx(&r.from))
            };
            let (gen_from, kill) = match (&r.cond, from) {
                (Cond::Invalid, Some(f)) => (vec![], vec![f]),
                (_, Some(f)) => (vec![f], vec![]),
                (_, None) => (vec![], vec![]),
            };
            match &r.target {
                Target::Node(t) => {
                    if let Some(t) = self.roles.iter().position(|x| &x.name == t) {
                        edges.push((from, t, gen_from, kill));
                    }
                }
                Target::Parallel(bs, join) => {
                    let mut g = gen_from.clone();
                    for b in bs {
                        let b = self.idx(b);
                        edges.push((from, b, gen_from.clone(), vec![]));
                        g.push(b);
                    }
                    edges.push((from, self.idx(join), g, vec![]));
                }
                Target::Map(w, _, join) => {
                    let w = self.idx(w);
                    edges.push((from, w, gen_from.clone(), vec![]));
                    let mut g = gen_from.clone();
                    if self.f.holes_fixed {
                        g.push(w);
                    }
                    edges.push((from, self.idx(join), g, vec![]));
                }
            }
        }
        let mut def: Vec<BTreeSet<usize>> = vec![all.clone(); n];
        loop {
            let mut changed = false;
            for node in 0..n {
                let mut acc: Option<BTreeSet<usize>> = None;
                for (from, to, g, k) in &edges {
                    if *to != node {
                        continue;
                    }
                    let mut s = match from {
                        Some(f) => def[*f].clone(),
                        None => BTreeSet::new(),
                    };
                    s.extend(g.iter().copied());
                    for x in k {
                        s.remove(x);
                    }
                    acc = Some(match acc {
                        None => s,
                        Some(a) => a.intersection(&s).copied().collect(),
                    });
                }
                let new = acc.unwrap_or_default();
                if new != def[node] {
                    def[node] = new;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        def
    }

    /// Templates, updates, tool command lines and artifacts, which read what has run.
    fn fill(&mut self) {
        let def = self.definite();
        #[allow(clippy::needless_range_loop)] // `self.roles[i]` is changed in the loop
        for i in 0..self.roles.len() {
            let mut avail: Vec<usize> = def[i].iter().copied().filter(|&j| j != i).collect();
            // Roles that may not have run: only where `check` must reject the read.
            let maybe: Vec<usize> = (0..self.roles.len())
                .filter(|j| *j != i && !def[i].contains(j))
                .collect();
            if self.f.holes_fixed && !maybe.is_empty() && self.rng.chance(0.05) {
                avail.push(*self.rng.pick(&maybe));
            }
            match self.roles[i].kind.clone() {
                Kind::Json(_) | Kind::Text => {
                    let (text, reads) = self.template(i, &avail);
                    self.roles[i].template = text;
                    self.roles[i].reads.extend(reads);
                    if self.rng.chance(0.15) {
                        self.roles[i].system = Some(format!(
                            "You are {} at step {{{{ step }}}}, round {{{{ round }}}}.\n",
                            self.roles[i].name
                        ));
                    }
                }
                Kind::Tool => {
                    self.roles[i].argv = self.argv(&avail);
                    self.roles[i].call = self.tool_choice(&avail);
                }
                Kind::Builtin => {}
            }
            let k = match self.roles[i].kind {
                Kind::Builtin => self.rng.range(0, 3),
                _ => self.rng.range(0, 1),
            };
            for _ in 0..k {
                if let Some(u) = self.update(i, &avail) {
                    self.roles[i].updates.push(u);
                }
            }
            if self.rng.chance(0.15) {
                let mut names: Vec<String> = [
                    "out_{{ visit }}.json",
                    "logs/{{ role }}_{{ step }}.txt",
                    "trace.jsonl",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let from_model = if self.f.model_artifact_names {
                    self.template_reads(&avail)
                } else {
                    Vec::new()
                };
                for snippet in from_model {
                    if snippet.starts_with("{{") && !snippet.contains(['|', '"']) {
                        names.push(format!("named/{snippet}.txt"));
                    }
                }
                let name = self.rng.pick(&names).clone();
                let op = if name.ends_with(".jsonl") { "+=" } else { "=" };
                let value = match self.roles[i].kind {
                    Kind::Builtin => "{ step: step, visit: visit }",
                    Kind::Json(_) | Kind::Text => {
                        if self.rng.chance(0.5) {
                            "prompt"
                        } else {
                            "output"
                        }
                    }
                    Kind::Tool => "output",
                };
                self.roles[i]
                    .artifacts
                    .push(format!("artifact \"{name}\" {op} {value}"));
            }
        }
    }

    /// A json role in `avail` with a string field and a `map[any]` field to call a tool with.
    fn tool_choice(&mut self, avail: &[usize]) -> Option<(String, String)> {
        let mut options = Vec::new();
        for &j in avail.iter().filter(|&&j| !self.worker(j)) {
            if let Kind::Json(ty) = &self.roles[j].kind {
                let fields = ty.fields();
                let name = fields.iter().find(|f| f.ty.is_stringy() && !f.opt);
                let args = fields
                    .iter()
                    .find(|f| matches!(f.ty.resolved(), Ty::MapAny) && !f.opt);
                if let (Some(n), Some(a)) = (name, args) {
                    let r = &self.roles[j].name;
                    options.push((format!("{r}.{}", n.name), format!("{r}.{}", a.name)));
                }
            }
        }
        if options.is_empty() || self.rng.chance(0.3) {
            return None;
        }
        Some(self.rng.pick(&options).clone())
    }

    /// Expressions of type string readable from `avail` (role outputs), plus literals.
    fn strings(&self, avail: &[usize], own: Option<usize>) -> Vec<String> {
        let mut out = vec!["input.q".to_string(), "\"x\"".to_string()];
        let mut roots: Vec<(String, usize)> = avail
            .iter()
            .map(|&j| (self.roles[j].name.clone(), j))
            .collect();
        if let Some(o) = own {
            roots.push(("output".into(), o));
        }
        for (root, j) in roots {
            match &self.roles[j].kind {
                Kind::Json(_) if self.worker(j) && root != "output" => {}
                Kind::Json(ty) => {
                    for f in ty.fields() {
                        if f.ty.is_stringy() && !f.opt {
                            out.push(format!("{root}.{}", f.name));
                        }
                        if f.ty.is_stringy() && f.opt && self.f.holes_fixed {
                            if self.f.coalesce {
                                out.push(format!("{root}.{} ?? \"none\"", f.name));
                            } else {
                                // Optional into non-optional: `check` must reject it.
                                out.push(format!("{root}.{}", f.name));
                            }
                        }
                    }
                }
                Kind::Text if !self.roles[j].worker || root == "output" => out.push(root),
                Kind::Tool if !self.roles[j].worker || root == "output" => {
                    out.push(format!("{root}.stdout"))
                }
                _ => {}
            }
        }
        out
    }

    fn update(&mut self, i: usize, avail: &[usize]) -> Option<String> {
        let own = match self.roles[i].kind {
            Kind::Builtin => None,
            _ => Some(i),
        };
        let strings = self.strings(avail, own);
        let mut options: Vec<String> = Vec::new();
        let m = &self.memory;
        if m.has("counter") {
            options.push("set counter = memory.counter + 1".into());
            let mut nums: Vec<(String, bool)> = Vec::new();
            let mut roots: Vec<(String, usize)> = avail
                .iter()
                .map(|&j| (self.roles[j].name.clone(), j))
                .collect();
            if let Some(o) = own {
                roots.push(("output".into(), o));
            }
            for (root, j) in roots {
                if self.worker(j) && root != "output" {
                    continue;
                }
                if let Kind::Json(ty) = &self.roles[j].kind {
                    for f in ty.fields() {
                        match f.ty.resolved() {
                            Ty::Int if !f.opt => nums.push((format!("{root}.{}", f.name), true)),
                            Ty::Float if !f.opt && self.f.assignable_set => {
                                nums.push((format!("{root}.{}", f.name), false))
                            }
                            _ => {}
                        }
                    }
                }
            }
            if !nums.is_empty() {
                let (e, _) = self.rng.pick(&nums).clone();
                options.push(format!("set counter = memory.counter + {e}"));
                options.push(format!("set counter = {e}"));
                options.push(format!("set counter = {e} - {e}"));
            }
        }
        if m.has("notes") {
            options.push(format!("notes.append({})", self.rng.pick(&strings)));
            if self.rng.chance(0.2) {
                options.push("notes.clear()".into());
            }
            // list[string] fields.
            for &j in avail.iter().filter(|&&j| !self.worker(j)) {
                if let Kind::Json(ty) = &self.roles[j].kind {
                    for f in ty.fields() {
                        if let Ty::List(item) = f.ty.resolved()
                            && item.is_stringy()
                            && !f.opt
                        {
                            options
                                .push(format!("notes.extend({}.{})", self.roles[j].name, f.name));
                        }
                    }
                }
            }
        }
        if m.has("items") && self.rng.chance(0.3) {
            options.push(format!("items.append({})", self.rng.pick(&strings)));
        }
        if m.has("label") {
            options.push(format!("set label = {}", self.rng.pick(&strings)));
        }
        if m.has("maybe_label") {
            options.push(format!("set maybe_label = {}", self.rng.pick(&strings)));
            for &j in avail.iter().filter(|&&j| !self.worker(j)) {
                if let Kind::Json(ty) = &self.roles[j].kind {
                    for f in ty.fields() {
                        if f.ty.is_stringy() && f.opt {
                            options.push(format!(
                                "set maybe_label = {}.{}",
                                self.roles[j].name, f.name
                            ));
                        }
                    }
                }
            }
        }
        if m.has("last") {
            let mut vals: Vec<String> = avail.iter().map(|&j| self.roles[j].name.clone()).collect();
            if own.is_some() {
                vals.push("output".into());
            }
            if !vals.is_empty() {
                options.push(format!("set last = {}", self.rng.pick(&vals)));
            }
        }
        if m.has("seen") {
            let key = self.rng.pick(&strings).clone();
            options.push(format!("seen.put({key}, {})", self.rng.pick(&strings)));
        }
        if let Some((tname, tty)) = self.memory.plan.clone() {
            let mut roots: Vec<(String, usize)> = avail
                .iter()
                .map(|&j| (self.roles[j].name.clone(), j))
                .collect();
            if let Some(o) = own {
                roots.push(("output".into(), o));
            }
            options.push("plan.clear()".into());
            options.push(format!("plan.truncate({})", self.rng.range(0, 2)));
            for (root, j) in roots {
                let Kind::Json(Ty::Named(n, _)) = &self.roles[j].kind else {
                    continue;
                };
                if *n != tname {
                    continue;
                }
                if self.worker(j) && root != "output" {
                    // The list of the worker's outputs: `extend` takes it, `append` not.
                    if self.f.map_join_list {
                        options.push(format!("plan.extend({root})"));
                        if self.f.holes_fixed && self.rng.chance(0.1) {
                            options.push(format!("plan.append({root})"));
                        }
                    }
                    continue;
                }
                options.push(format!("plan.append({root})"));
                options.push(format!("plan.extend([{root}, {root}])"));
                // `plan.patch(..)` is documented but `check` has no such operation (finding 5).
                if let Some(id) = tty
                    .fields()
                    .iter()
                    .find(|f| matches!(f.ty.resolved(), Ty::Int) && !f.opt)
                {
                    options.push(format!("plan.truncate({root}.{})", id.name));
                }
            }
        }
        self.issue22_updates(i, avail, &mut options);
        if options.is_empty() {
            return None;
        }
        Some(self.rng.pick(&options).clone())
    }

    /// Issue 22 §3 updates: the list of a map worker's outputs, `item`, and reply values
    /// typed `any` in arithmetic, `len` and stores.
    fn issue22_updates(&mut self, i: usize, avail: &[usize], options: &mut Vec<String>) {
        let names: Vec<&'static str> = self.memory.items.iter().map(|(n, _, _)| *n).collect();
        let has = |m: &str| names.contains(&m);
        if self.f.map_join_list {
            let workers: Vec<usize> = avail.iter().copied().filter(|&j| self.worker(j)).collect();
            for j in workers {
                let name = self.roles[j].name.clone();
                if has("counter") {
                    options.push(format!("set counter = len({name})"));
                }
                if has("notes") && matches!(self.roles[j].kind, Kind::Text) {
                    options.push(format!("notes.extend({name})"));
                    if self.f.holes_fixed && self.rng.chance(0.1) {
                        options.push(format!("notes.append({name})"));
                    }
                }
                if has("last") {
                    options.push(format!("set last = {name}"));
                }
            }
        }
        if self.f.memory_maps && has("tally") {
            let key = self
                .rng
                .pick(&["\"alpha\"", "input.q", "\"beta\""])
                .to_string();
            options.push(format!("tally.put({key}, 1)"));
            options.push(format!(
                "tally.put({key}, (memory.tally.alpha ?? 0) + (memory.tally.beta ?? 1))"
            ));
            if self.f.holes_fixed && self.rng.chance(0.05) {
                // The key may be absent: `check` must reject arithmetic on it.
                options.push(format!("tally.put({key}, memory.tally.alpha + 1)"));
            }
        }
        if self.f.item_typed && self.worker(i) {
            // `memory.items` is a list of strings: so is `item`.
            if has("label") {
                options.push("set label = item".into());
            }
            if has("counter") {
                options.push("set counter = len(item)".into());
                if self.f.holes_fixed && self.rng.chance(0.05) {
                    options.push("set counter = item".into());
                }
            }
        }
        if self.f.sometimes_names {
            if self.worker(i) {
                if has("notes") {
                    options.push("notes.append(item)".into());
                }
                if has("last") {
                    options.push("set last = item".into());
                }
            } else if self.f.holes_fixed && has("last") && self.rng.chance(0.03) {
                // Not a map worker: `check` must reject `item`.
                options.push("set last = item".into());
            }
        }
        if self.f.reply_values {
            let mut roots: Vec<(String, usize)> = avail
                .iter()
                .filter(|&&j| !self.worker(j))
                .map(|&j| (self.roles[j].name.clone(), j))
                .collect();
            if matches!(self.roles[i].kind, Kind::Json(_)) {
                roots.push(("output".into(), i));
            }
            for (root, j) in roots {
                let Some(p) = self.params_field(j) else {
                    continue;
                };
                let v = format!("{root}.{p}");
                if has("counter") {
                    options.push(format!("set counter = memory.counter + {v}.n"));
                    options.push(format!("set counter = len({v}.extra)"));
                    options.push(format!("set counter = {v}.n"));
                }
                if has("last") {
                    options.push(format!("set last = [input.q] + {v}.extra"));
                    options.push(format!("set last = -{v}.n"));
                }
                if has("notes") {
                    options.push(format!("notes.append({v}.text)"));
                    options.push(format!("notes.extend({v}.extra)"));
                }
                if has("label") {
                    options.push(format!("set label = {v}.text"));
                }
            }
        }
    }

    fn argv(&mut self, avail: &[usize]) -> Vec<String> {
        let mut cmd: Vec<String> = match self.rng.below(7) {
            0 => vec!["true".into()],
            1 => vec!["false".into()],
            2 => vec!["echo".into(), "hello {{ round }}".into()],
            3 => vec![
                "sh".into(),
                "-c".into(),
                "echo '{\"n\": 1, \"word\": \"alpha\"}'".into(),
            ],
            4 => vec!["sh".into(), "-c".into(), "echo partial; exit 3".into()],
            5 => vec!["printf".into(), "a\\nb\\n".into()],
            _ => vec!["echo".into(), "{{ input.q }}".into()],
        };
        // A command argument taken from an earlier role's output.
        let strs: Vec<String> = self
            .template_reads(avail)
            .into_iter()
            .filter(|s| !s.contains('%'))
            .collect();
        if cmd[0] == "echo" && !strs.is_empty() && self.rng.chance(0.4) {
            cmd.push(self.rng.pick(&strs).clone());
        }
        cmd
    }

    /// Template snippets that read role outputs in `avail`.
    fn template_reads(&mut self, avail: &[usize]) -> Vec<String> {
        let mut out = Vec::new();
        for &j in avail {
            let name = self.roles[j].name.clone();
            if self.f.map_join_list && self.worker(j) {
                // The list of the worker's outputs.
                out.push(format!("{{{{ {name} | length }}}}"));
                match self.roles[j].kind.clone() {
                    Kind::Json(ty) => {
                        let field = ty
                            .fields()
                            .iter()
                            .find(|f| !f.opt && f.ty.is_scalar())
                            .map(|f| f.name.clone());
                        match &field {
                            Some(f) => out.push(format!(
                                "{{% for w in {name} %}}- {{{{ w.{f} }}}}\n{{% endfor %}}"
                            )),
                            None => out.push(format!(
                                "{{% for w in {name} %}}- {{{{ w | json_encode() }}}}\n{{% endfor %}}"
                            )),
                        }
                        if let Some(f) = field
                            && self.f.holes_fixed
                            && self.rng.chance(0.05)
                        {
                            // A field of the list itself: `check` must reject it.
                            out.push(format!("{{{{ {name}.{f} }}}}"));
                        }
                    }
                    Kind::Text => out.push(format!(
                        "{{% for w in {name} %}}- {{{{ w }}}}\n{{% endfor %}}"
                    )),
                    Kind::Tool => out.push(format!(
                        "{{% for w in {name} %}}- {{{{ w.stdout }}}}\n{{% endfor %}}"
                    )),
                    Kind::Builtin => {}
                }
                continue;
            }
            if self.f.reply_values
                && let Some(p) = self.params_field(j)
            {
                out.push(format!(
                    "{{% if {name}.{p}.text %}}Text: {{{{ {name}.{p}.text }}}}{{% endif %}}"
                ));
                out.push(format!("{{{{ {name}.{p}.n | default(value=\"-\") }}}}"));
                if self.f.template_kinds {
                    // Right for some replies, of the wrong kind for others: those end the
                    // run at `invalid_output`.
                    let v = format!("{name}.{p}");
                    out.push(format!(
                        "{{% if {v}.extra %}}{{% for e in {v}.extra %}}[{{{{ e }}}}]{{% endfor %}}{{% endif %}}"
                    ));
                    out.push(format!("{{{{ {v}.text | default(value=\"\") | upper }}}}"));
                    out.push(format!(
                        "{{% if {v}.n %}}{{{{ {v}.n + 1 }}}}{{% if {v}.n > 2 %}} big{{% endif %}}{{% endif %}}"
                    ));
                    out.push(format!(
                        "{{% if {v}.text %}}{{{{ \"T: \" ~ {v}.text }}}}{{% endif %}}"
                    ));
                    out.push(format!(
                        "{{{{ {v}.extra | default(value=[]) | join(sep=\", \") }}}}"
                    ));
                    out.push(format!("{{{{ {v} | get(key=\"text\", default=\"-\") }}}}"));
                }
                if self.f.holes_fixed && self.rng.chance(0.05) {
                    // A field read through `any`, unguarded: `check` must reject it.
                    out.push(format!("{{{{ {name}.{p}.text }}}}"));
                }
            }
            match self.roles[j].kind.clone() {
                Kind::Json(ty) => {
                    if let Ty::List(_) = ty.resolved() {
                        out.push(format!(
                            "{{% for x in {name} %}}- {{{{ x }}}}\n{{% endfor %}}"
                        ));
                    }
                    for f in ty.fields() {
                        let p = format!("{name}.{}", f.name);
                        if f.opt {
                            out.push(format!("{{{{ {p} | default(value=\"none\") }}}}"));
                            out.push(format!("{{% if {p} %}}{{{{ {p} }}}}{{% endif %}}"));
                            if self.f.template_kinds && f.ty.is_stringy() {
                                out.push(format!(
                                    "{{% if {p} %}}{{{{ \"N: \" ~ {p} }}}}{{% endif %}}"
                                ));
                                if self.f.holes_fixed && self.rng.chance(0.05) {
                                    // May be null: `check` must reject it.
                                    out.push(format!("{{{{ \"N: \" ~ {p} }}}}"));
                                }
                            }
                            if self.f.holes_fixed {
                                out.push(format!("{{{{ {p} }}}}"));
                            }
                            continue;
                        }
                        if self.f.template_kinds {
                            self.typed_operators(&p, &f.ty, &mut out);
                        }
                        match f.ty.resolved() {
                            Ty::List(item) => {
                                let body = match item.resolved() {
                                    Ty::Obj(fs) => {
                                        let g = &fs[0];
                                        if g.opt {
                                            format!("{{{{ s.{} | default(value=\"-\") }}}}", g.name)
                                        } else {
                                            format!("{{{{ s.{} }}}}", g.name)
                                        }
                                    }
                                    _ => "{{ s }}".into(),
                                };
                                out.push(format!("{{% for s in {p} %}}* {body}\n{{% endfor %}}"));
                                out.push(format!("{{{{ {p} | length }}}}"));
                            }
                            Ty::Obj(fs) => {
                                let g = &fs[0];
                                if !g.opt && g.ty.is_scalar() {
                                    out.push(format!("{{{{ {p}.{} }}}}", g.name));
                                }
                            }
                            _ => out.push(format!("{{{{ {p} }}}}")),
                        }
                    }
                    if self.f.holes_fixed && self.rng.chance(0.05) {
                        // A misspelt field: `check` must reject it.
                        out.push(format!("{{{{ {name}.nmae }}}}"));
                    }
                }
                Kind::Text if !self.roles[j].worker => out.push(format!("{{{{ {name} }}}}")),
                Kind::Tool if !self.roles[j].worker => {
                    out.push(format!("{{{{ {name}.stdout }}}}"));
                    out.push(format!(
                        "{{% if {name}.ok %}}passed{{% else %}}failed{{% endif %}}"
                    ));
                }
                Kind::Text | Kind::Tool => out.push(format!("{{{{ {name} | length }}}}")),
                Kind::Builtin => {}
            }
        }
        out
    }

    /// Operators on a required field of a declared type: the ones it takes, and rarely one
    /// it cannot take, which `check` must reject.
    fn typed_operators(&mut self, p: &str, ty: &Ty, out: &mut Vec<String>) {
        match ty.resolved() {
            Ty::Int => {
                out.push(format!("{{{{ {p} + 1 }}}}"));
                out.push(format!("{{% if {p} > 2 %}}big{{% endif %}}"));
                out.push(format!("{{% if {p} is odd %}}odd{{% endif %}}"));
            }
            Ty::Str | Ty::Lit(_) => {
                out.push(format!("{{{{ \"N: \" ~ {p} }}}}"));
                out.push(format!("{{% if \"a\" in {p} %}}has a{{% endif %}}"));
                if self.f.holes_fixed && self.rng.chance(0.05) {
                    out.push(format!("{{{{ {p} + 1 }}}}"));
                }
            }
            Ty::List(_) => {
                out.push(format!("{{% if \"a\" in {p} %}}has a{{% endif %}}"));
                if self.f.holes_fixed && self.rng.chance(0.05) {
                    out.push(format!("{{{{ \"N: \" ~ {p} }}}}"));
                }
            }
            Ty::Bool if self.f.holes_fixed && self.rng.chance(0.05) => {
                out.push(format!("{{% if {p} > 1 %}}big{{% endif %}}"));
            }
            _ => {}
        }
    }

    fn template(&mut self, i: usize, avail: &[usize]) -> (String, Vec<&'static str>) {
        let mut t = String::from("Task (visit {{ visit }}): {{ input.q }}\n");
        let mut reads = Vec::new();
        if self.roles[i].worker {
            t.push_str("Item: {{ item }}\n");
        }
        if self.f.sometimes_names {
            self.sometimes_names(i, &mut t, &mut reads);
        }
        let snippets = self.template_reads(avail);
        for _ in 0..self.rng.range(0, 3) {
            if snippets.is_empty() {
                break;
            }
            let snippet = self.rng.pick(&snippets).clone();
            t.push_str(&snippet);
            t.push('\n');
        }
        if self.memory.has("notes") && self.rng.chance(0.4) {
            t.push_str("{% for n in memory.notes %}note {{ loop.index }}: {{ n }}\n{% endfor %}");
            reads.push("notes");
        }
        if let Some((_, ty)) = &self.memory.plan
            && self.rng.chance(0.4)
        {
            let f = &ty.fields()[0];
            let body = if f.opt {
                format!("{{{{ p.{} | default(value=\"-\") }}}}", f.name)
            } else if f.ty.is_scalar() {
                format!("{{{{ p.{} }}}}", f.name)
            } else {
                format!("{{{{ p.{} | length }}}}", f.name)
            };
            let _ = write!(
                t,
                "{{% for p in memory.plan %}}{{{{ loop.index }}}}. {body}\n{{% endfor %}}"
            );
            reads.push("plan");
        }
        if self.memory.has("counter") && self.rng.chance(0.3) {
            t.push_str("Counter: {{ memory.counter }}\n");
            reads.push("counter");
        }
        if self.f.memory_maps {
            self.memory_map_reads(&mut t, &mut reads);
        }
        if self.memory.has("maybe_label") && self.rng.chance(0.2) {
            t.push_str("{% if memory.maybe_label %}Label: {{ memory.maybe_label }}{% endif %}\n");
            reads.push("maybe_label");
        }
        if self.rng.chance(0.2) {
            t.push_str("{% set greeting = \"Hello \" ~ input.q %}{{ greeting }}\n");
        }
        if !self.partials.is_empty() && self.rng.chance(0.5) {
            let k = self.rng.below(self.partials.len());
            let (name, _, r) = &self.partials[k];
            let _ = writeln!(t, "{{% include \"{name}\" %}}");
            reads.extend(r.iter().copied());
        }
        if matches!(self.roles[i].kind, Kind::Json(_)) {
            t.push_str("Answer in JSON.{% if last_error %} Your last answer was wrong: {{ last_error }}{% endif %}\n");
        }
        (t, reads)
    }

    /// Maps the workflow fills itself read by key, and a list read at a computed index:
    /// guarded (rarely not, which `check` must reject).
    fn memory_map_reads(&mut self, t: &mut String, reads: &mut Vec<&'static str>) {
        let unguarded = self.f.holes_fixed && self.rng.chance(0.03);
        for map in ["tally", "seen"] {
            if !self.memory.has(map) || !self.rng.chance(0.3) {
                continue;
            }
            reads.push(map);
            let snippet = match self.rng.below(4) {
                0 => format!(
                    "{{% if memory.{map}.alpha %}}Alpha: {{{{ memory.{map}.alpha }}}}{{% endif %}}"
                ),
                1 => format!("{{{{ memory.{map} | get(key=\"alpha\", default=\"-\") }}}}"),
                2 => format!(
                    "{{% for k, v in memory.{map} %}}{{{{ k }}}}={{{{ v | json_encode() }}}} {{% endfor %}}"
                ),
                _ => format!("{{{{ memory.{map}[input.q] | default(value=\"-\") }}}}"),
            };
            t.push_str(&snippet);
            t.push('\n');
            if unguarded {
                t.push_str(&format!("Alpha: {{{{ memory.{map}.alpha }}}}\n"));
            }
        }
        if self.memory.has("items") && self.memory.has("counter") && self.rng.chance(0.2) {
            reads.push("items");
            reads.push("counter");
            t.push_str("{% if memory.items[memory.counter] %}At: {{ memory.items[memory.counter] }}{% endif %}\n");
            if unguarded {
                t.push_str("At: {{ memory.items[memory.counter] }}\n");
            }
        }
    }

    /// Names that exist only sometimes, guarded (and rarely not, which `check` must reject).
    fn sometimes_names(&mut self, i: usize, t: &mut String, reads: &mut Vec<&'static str>) {
        let worker = self.roles[i].worker;
        if self.rng.chance(0.15) {
            // As a partial shared with a map worker would read it.
            t.push_str("{% if item is defined %}Item: {{ item }}{% else %}No item.{% endif %}\n");
        }
        if !worker && self.f.holes_fixed && self.rng.chance(0.02) {
            t.push_str("Item: {{ item }}\n");
        }
        if self.rng.chance(0.15) {
            t.push_str("{% if visit > 1 %}{% set hint = \"again\" %}{% else %}{% set hint = \"first\" %}{% endif %}Hint: {{ hint }}\n");
        }
        if self.rng.chance(0.1) {
            t.push_str("{% if visit > 1 %}{% set late = true %}{% endif %}{% if late is defined %}Late.{% endif %}\n");
        }
        if self.f.holes_fixed && self.rng.chance(0.02) {
            t.push_str("{% if visit > 1 %}{% set later = true %}{% endif %}Later: {{ later }}\n");
        }
        if self.memory.has("notes") && self.rng.chance(0.1) {
            t.push_str("{% for n in memory.notes %}{% set_global last_note = n %}{% endfor %}{% if last_note is defined %}Last: {{ last_note }}{% endif %}\n");
            reads.push("notes");
        }
    }

    fn partial_text(&mut self) -> (String, Vec<&'static str>) {
        match self.rng.below(3) {
            0 if self.memory.has("notes") => (
                "Notes:\n{% for n in memory.notes %}- {{ n }}\n{% endfor %}".into(),
                vec!["notes"],
            ),
            1 if self.memory.has("counter") => (
                "{% if memory.counter > 1 %}Many rounds.{% else %}Few rounds.{% endif %}\n".into(),
                vec!["counter"],
            ),
            _ => ("Question again: {{ input.q | upper }}\n".into(), vec![]),
        }
    }

    // ---- replies -------------------------------------------------------------------------

    /// The replies of every llm role, and the llm roles left out on purpose.
    #[allow(clippy::type_complexity)]
    fn replies(&mut self) -> (Vec<(String, Option<u64>, Vec<String>)>, Vec<String>) {
        let mut out = Vec::new();
        let mut omitted = Vec::new();
        for i in 0..self.roles.len() {
            let role = self.roles[i].clone();
            let attempts = role.retries as usize + 1;
            if !matches!(role.kind, Kind::Json(_) | Kind::Text) {
                continue;
            }
            // Gaps: no reply at all (the run is refused before it starts), or replies for
            // the first visits only (the run ends at `limit` if it visits the role again).
            let (visits, every) = match self.f.scripted_gaps {
                true if self.rng.chance(0.015) => {
                    omitted.push(role.name.clone());
                    continue;
                }
                true if self.rng.chance(0.08) => (self.rng.range(1, 3), false),
                _ => (8, true),
            };
            match &role.kind {
                Kind::Json(ty) => {
                    for visit in 1..=visits {
                        let texts = (0..attempts)
                            .map(|a| self.json_reply(ty, a + 1 == attempts))
                            .collect();
                        out.push((role.name.clone(), Some(visit), texts));
                    }
                    if every {
                        let every = self.json_reply(ty, true);
                        out.push((role.name.clone(), None, vec![every]));
                    }
                }
                Kind::Text => {
                    for visit in 1..=visits {
                        out.push((role.name.clone(), Some(visit), vec![self.text_reply()]));
                    }
                    if every {
                        out.push((role.name.clone(), None, vec![self.text_reply()]));
                    }
                }
                _ => {}
            }
        }
        (out, omitted)
    }

    fn text_reply(&mut self) -> String {
        match self.rng.below(6) {
            0 => String::new(),
            1 => "yes, that is done".into(),
            2 => "{\"not\": \"parsed\"}".into(),
            3 => "```python\nprint('hi')\n```".into(),
            _ => self.rng.pick(WORDS).to_string(),
        }
    }

    /// A reply from one of the families; the last attempt stays valid (or near-valid)
    /// unless invalid outputs are routable.
    fn json_reply(&mut self, ty: &Ty, last: bool) -> String {
        let invalid_ok = !last || (self.f.invalid_replies && self.f.invalid_routes);
        let roll = self.rng.below(10);
        if invalid_ok && roll < 3 {
            return self.invalid(ty);
        }
        if self.f.coercion && roll < 6 {
            let v = self.value(ty);
            let near = self.near(ty, v);
            return self.format(near);
        }
        let v = self.value(ty);
        self.format(v)
    }

    fn value(&mut self, ty: &Ty) -> Value {
        match ty.resolved() {
            Ty::Str => json!(self.rng.pick(WORDS)),
            Ty::Int if self.rng.chance(0.05) => {
                // Valid for `int` as the validator sees it: whole numbers of any size.
                self.rng
                    .pick(&[
                        json!(i64::MAX),
                        json!(u64::MAX),
                        json!(1e300),
                        json!(-1e300),
                        json!(4.0),
                    ])
                    .clone()
            }
            Ty::Int => json!(self.rng.range(0, 100) as i64 - 3),
            Ty::Float if self.rng.chance(0.05) => {
                json!(*self.rng.pick(&[1.7e308, -1.7e308, 5e-324]))
            }
            Ty::Float => json!(*self.rng.pick(&[0.5, 1.0, 3.25, -2.0, 100.0])),
            Ty::Bool => json!(self.rng.chance(0.5)),
            Ty::Lit(m) => json!(self.rng.pick(m)),
            Ty::MapAny => match self
                .rng
                .below(match (self.f.reply_values, self.f.template_kinds) {
                    (_, true) => 8,
                    (true, false) => 7,
                    _ => 4,
                }) {
                7 => json!({"n": {"k": 1}, "text": ["x"], "extra": 5}),
                0 => json!({}),
                1 => json!({"text": self.rng.pick(WORDS)}),
                2 => json!({"n": 3}),
                3 => json!({"n": "three", "extra": [1, 2]}),
                // The kinds `check` cannot know: a string where a list is meant (the
                // LLM-IDE agent's `args`), a number where a string is.
                4 => json!({"n": 2, "text": "ok", "extra": ["a", "b"]}),
                5 => json!({"n": [1], "text": 7, "extra": "calc.py"}),
                _ => json!({"text": {"nested": true}, "extra": null}),
            },
            Ty::List(item) => {
                let item = item.clone();
                Value::Array((0..self.rng.below(4)).map(|_| self.value(&item)).collect())
            }
            Ty::Obj(fields) => {
                let fields = fields.clone();
                let mut map = serde_json::Map::new();
                for f in &fields {
                    if f.opt {
                        match self.rng.below(5) {
                            0 | 1 if self.f.holes_fixed => continue,
                            0 => {
                                map.insert(f.name.clone(), Value::Null);
                            }
                            _ => {
                                let v = self.value(&f.ty);
                                map.insert(f.name.clone(), v);
                            }
                        }
                    } else {
                        let v = self.value(&f.ty);
                        map.insert(f.name.clone(), v);
                    }
                }
                Value::Object(map)
            }
            Ty::Named(..) => unreachable!(),
        }
    }

    /// One coercible change somewhere in a valid value.
    fn near(&mut self, ty: &Ty, v: Value) -> Value {
        match (ty.resolved(), v) {
            (Ty::Int | Ty::Float, Value::Number(n)) if self.rng.chance(0.5) => json!(n.to_string()),
            (Ty::Str, _) if self.rng.chance(0.3) => json!(7),
            (Ty::Lit(_), Value::String(s)) if self.rng.chance(0.5) => json!(s.to_uppercase()),
            (Ty::List(item), Value::Array(items)) => {
                if !items.is_empty() && self.rng.chance(0.3) {
                    items[0].clone()
                } else {
                    let item = item.clone();
                    Value::Array(items.into_iter().map(|x| self.near(&item, x)).collect())
                }
            }
            (Ty::Obj(fields), Value::Object(mut map)) => {
                let fields = fields.clone();
                if fields.len() == 1 && !fields[0].opt && self.rng.chance(0.3) {
                    // The one-field object given as its bare value.
                    return map.remove(&fields[0].name).unwrap_or(Value::Null);
                }
                match self.rng.below(4) {
                    0 => {
                        map.insert("extra_field".into(), json!("ignored"));
                    }
                    1 => {
                        if let Some(f) = fields.iter().find(|f| f.opt) {
                            map.remove(&f.name);
                        }
                    }
                    _ => {
                        let f = self.rng.pick(&fields).clone();
                        if let Some(x) = map.remove(&f.name) {
                            let x = self.near(&f.ty, x);
                            map.insert(f.name.clone(), x);
                        }
                    }
                }
                Value::Object(map)
            }
            (_, v) => v,
        }
    }

    fn invalid(&mut self, ty: &Ty) -> String {
        match self.rng.below(9) {
            0 => "I think the answer is yes.".into(),
            1 => "null".into(),
            2 => String::new(),
            3 => "[]".into(),
            4 => "{".into(),
            5 => "```\nnot json at all\n```".into(),
            _ => {
                let v = self.value(ty);
                let bad = self.break_value(ty, v);
                bad.to_string()
            }
        }
    }

    /// A wrong type or a missing required field somewhere in a valid value.
    fn break_value(&mut self, ty: &Ty, v: Value) -> Value {
        match (ty.resolved(), v) {
            (Ty::Obj(fields), Value::Object(mut map)) => {
                let req: Vec<Field> = fields.iter().filter(|f| !f.opt).cloned().collect();
                if req.is_empty() {
                    return json!("not an object");
                }
                let f = self.rng.pick(&req).clone();
                if self.rng.chance(0.4) {
                    map.remove(&f.name);
                } else {
                    let x = map.remove(&f.name).unwrap_or(Value::Null);
                    let x = self.break_value(&f.ty, x);
                    map.insert(f.name.clone(), x);
                }
                Value::Object(map)
            }
            (Ty::List(_), _) => json!({"not": "a list"}),
            (Ty::Str, _) => json!({"text": "an object"}),
            (Ty::Int, _) => json!("many"),
            (Ty::Float, _) => json!([1.5]),
            (Ty::Bool, _) => json!("maybe"),
            (Ty::Lit(_), _) => json!("not_a_member"),
            (Ty::MapAny, _) => json!(["not", "a", "map"]),
            (_, _) => Value::Null,
        }
    }

    fn format(&mut self, v: Value) -> String {
        let compact = v.to_string();
        match self.rng.below(8) {
            0 => serde_json::to_string_pretty(&v).unwrap(),
            1 => format!("```json\n{compact}\n```"),
            2 => format!("Here you go:\n{compact}\nHope that helps."),
            3 if compact.ends_with('}') && compact.len() > 2 => {
                format!("{},}}", &compact[..compact.len() - 1])
            }
            _ => compact,
        }
    }

    // ---- rendering -----------------------------------------------------------------------

    fn render(&self) -> (String, Vec<(String, String)>) {
        let mut s = String::new();
        let mut prompts: Vec<(String, String)> = self
            .partials
            .iter()
            .map(|(n, t, _)| (n.clone(), t.clone()))
            .collect();
        s.push_str(
            "workflow generated {\n  prompts = \"prompts\"\n  input q: string = \"hello\"\n  input n: int = 2\n",
        );
        // Half the bounded cases bound every input and value memory at once, half name
        // each one (`max_bytes = { NAME: ... }`, a list's `max_len` too).
        let sizes = if !self.size_limits {
            String::new()
        } else if self.seed.is_multiple_of(4) {
            "\n    max_input_bytes = 256\n    max_memory_bytes = \"2KB\"".to_string()
        } else {
            let mut bytes = vec!["q = 256".to_string(), "n = 64".to_string()];
            let mut lens = Vec::new();
            for (n, t, _) in &self.memory.items {
                bytes.push(format!("{n} = \"2KB\""));
                if t.starts_with("list[") {
                    lens.push(format!("{n} = 12"));
                }
            }
            let mut s = format!("\n    max_bytes = {{ {} }}", bytes.join(", "));
            if !lens.is_empty() {
                s.push_str(&format!("\n    max_len = {{ {} }}", lens.join(", ")));
            }
            s
        };
        let _ = write!(
            s,
            "  limits {{\n    max_steps = {}{sizes}\n  }}\n}}\n\n",
            self.max_steps
        );
        for (name, ty) in &self.named {
            match ty {
                Ty::Obj(fields) => {
                    let _ = writeln!(s, "type {name} {{");
                    for f in fields {
                        let _ = writeln!(
                            s,
                            "  {}: {}{}",
                            f.name,
                            f.ty.render(),
                            if f.opt { "?" } else { "" }
                        );
                    }
                    s.push_str("}\n");
                }
                other => {
                    let _ = writeln!(s, "type {name} = {}", other.render());
                }
            }
        }
        if !self.memory.items.is_empty() {
            s.push_str("\nmemory {\n");
            for (n, t, v) in &self.memory.items {
                let _ = writeln!(s, "  {n}: {t} = {v}");
            }
            s.push_str("}\n");
        }
        if self.roles.iter().any(|r| r.call.is_some()) {
            s.push_str(TOOLS);
        }
        for r in &self.roles {
            let kind = match r.kind {
                Kind::Json(_) | Kind::Text => "llm",
                Kind::Tool => "tool",
                Kind::Builtin => "builtin",
            };
            let _ = writeln!(s, "\nrole {}: {kind} {{", r.name);
            match &r.kind {
                Kind::Json(_) | Kind::Text => {
                    let file = format!("{}.tera", r.name);
                    let _ = writeln!(s, "  prompt = \"{file}\"");
                    prompts.push((file, r.template.clone()));
                    if let Some(sys) = &r.system {
                        let file = format!("{}_system.tera", r.name);
                        let _ = writeln!(s, "  system = \"{file}\"");
                        prompts.push((file, sys.clone()));
                    }
                    if !r.reads.is_empty() {
                        let reads: Vec<&str> = r.reads.iter().copied().collect();
                        let _ = writeln!(s, "  reads = [{}]", reads.join(", "));
                    }
                    if r.retries != 2 {
                        let _ = writeln!(s, "  retries = {}", r.retries);
                    }
                }
                Kind::Tool if r.call.is_some() => {
                    let (call, args) = r.call.clone().unwrap();
                    let _ = writeln!(
                        s,
                        "  tools = [t_echo, t_true]\n  call = {call}\n  args = {args}"
                    );
                    s.push_str("  timeout = 10s\n");
                }
                Kind::Tool => {
                    let argv: Vec<String> = r.argv.iter().map(|a| format!("{a:?}")).collect();
                    let _ = writeln!(s, "  command = [{}]", argv.join(", "));
                    s.push_str("  timeout = 10s\n");
                }
                Kind::Builtin => {}
            }
            if let Some(m) = r.max_visits {
                let _ = writeln!(s, "  max_visits = {m}");
            }
            match &r.kind {
                Kind::Json(ty) => {
                    let _ = writeln!(s, "  output json {}", ty.render());
                }
                Kind::Text => s.push_str("  output text\n"),
                _ => {}
            }
            if !r.updates.is_empty() {
                s.push_str("  update {\n");
                for u in &r.updates {
                    let _ = writeln!(s, "    {u}");
                }
                s.push_str("  }\n");
            }
            for a in &r.artifacts {
                let _ = writeln!(s, "  {a}");
            }
            s.push_str("}\n");
        }
        s.push('\n');
        for r in &self.routes {
            let target = match &r.target {
                Target::Node(t) => t.clone(),
                Target::Parallel(bs, j) => format!("parallel [{}] -> {j}", bs.join(", ")),
                Target::Map(w, over, j) => format!("map {w} over {over} -> {j}"),
            };
            let mut line = format!("{} -> {target}", r.from);
            if r.backtrack {
                line.push_str(" backtrack");
            }
            if let Some(m) = r.max {
                let _ = write!(line, " max {m}");
            }
            match &r.cond {
                Cond::Always => {}
                Cond::When(c) => {
                    let _ = write!(line, " when {c}");
                }
                Cond::Otherwise => line.push_str(" otherwise"),
                Cond::Invalid => {
                    let _ = write!(line, " when {}.invalid", r.from);
                }
            }
            s.push_str(&line);
            s.push('\n');
        }
        s.push('\n');
        for (name, code, guard) in &self.exits {
            let mut line = format!("exit {name}");
            if *code != 0 {
                let _ = write!(line, " {{ code = {code} }}");
            }
            if let Some(g) = guard {
                let _ = write!(line, " when {g}");
            }
            s.push_str(&line);
            s.push('\n');
        }
        let _ = &self.has_invalid_exit;
        (s, prompts)
    }
}
