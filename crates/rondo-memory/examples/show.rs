use rondo_memory::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let root = std::path::Path::new(&a[1]);
    let lines: Vec<usize> = a[3].split(',').map(|x| x.parse().unwrap()).collect();
    let mut cc = CodeContext::new(ScoreParams {
        alpha: 1.0,
        beta: 1.0,
        gamma: 0.9,
        threshold: 0.0,
    })
    .unwrap();
    cc.begin_operation();
    println!("{:?}", cc.record_access(root, &a[2], &lines).unwrap());
    let v = cc.render(root);
    for f in &v.files {
        println!("### File: {}", f.path);
        for i in &f.items {
            match i {
                ViewItem::Gap => println!("..."),
                ViewItem::Line { number, text } => println!("{number:5} {text}"),
            }
        }
    }
}
