fn main() {
    let src = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_python::LANGUAGE.into())
        .unwrap();
    let t = p.parse(&src, None).unwrap();
    println!("{}", t.root_node().to_sexp());
}
