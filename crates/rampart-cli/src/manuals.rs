//! `rampart generate-manuals DIR` (hidden): the manual pages and shell completions, made from
//! the command-line definition itself so that they never drift from it. `scripts/install`
//! runs it and installs the result.

use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

/// Writes `DIR/man1/rampart.1` and `DIR/man1/rampart-SUBCOMMAND.1` for every subcommand,
/// and `DIR/completions/{rampart.bash,_rampart,rampart.fish}`.
pub fn generate(dir: &Path) -> Result<(), String> {
    let man_dir = dir.join("man1");
    let completions_dir = dir.join("completions");
    for d in [&man_dir, &completions_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    clap_mangen::generate_to(crate::Cli::command(), &man_dir).map_err(|e| {
        format!(
            "cannot write the manual pages in {}: {e}",
            man_dir.display()
        )
    })?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(
            shell,
            &mut crate::Cli::command(),
            "rampart",
            &completions_dir,
        )
        .map_err(|e| {
            format!(
                "cannot write the {shell} completions in {}: {e}",
                completions_dir.display()
            )
        })?;
    }
    outln!(
        "wrote manual pages to {} and completions to {}",
        man_dir.display(),
        completions_dir.display()
    );
    Ok(())
}
