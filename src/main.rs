//! `rtune`, the command a user types (see `rtune_cli::front`): it links no libtorch, answers
//! `--help`, `--version`, mistakes in the arguments, `completions`, `ls`, `show`, `watch` and
//! `status` itself, and becomes the full program, `rtune-torch` (src/bin/rtune-torch.rs), for
//! every other command, telling it which sources it was built from (build.rs).

fn main() {
    rtune_cli::front::main(env!("RTUNE_SOURCES"))
}
