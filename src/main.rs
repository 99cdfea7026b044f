fn main() {
    println!("rtune {}", env!("CARGO_PKG_VERSION"));
}
