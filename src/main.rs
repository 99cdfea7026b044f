//! `rtune`, the command a user types (see `rtune_cli::front`): it links no libtorch, answers
//! `--help`, `--version`, `completions` and mistakes in the arguments itself, and becomes the
//! full program, `rtune-torch` (src/bin/rtune-torch.rs), for every other command.

fn main() {
    rtune_cli::front::main()
}
