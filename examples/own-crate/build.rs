// rtune's build passes on where libtorch is (rtune's `links` metadata): with this rpath your
// binaries, examples and tests find it at run time without LD_LIBRARY_PATH.
fn main() {
    let lib = std::env::var("DEP_RTUNE_LIBTORCH_LIB").expect("rtune is one of [dependencies]");
    println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
}
