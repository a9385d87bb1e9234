//! A small program using rampart as a library: it opens a store (made by `rampart mkfs`) and
//! runs one file operation through the path API, with no mount and no system call per file
//! operation. The store must not be mounted meanwhile (it is refused, with the reason).
//!
//! ```text
//! cargo run --release -p rampart-core --example library -- STORE put PATH TEXT
//! cargo run --release -p rampart-core --example library -- STORE cat PATH
//! cargo run --release -p rampart-core --example library -- STORE ls PATH
//! cargo run --release -p rampart-core --example library -- STORE mkdir PATH
//! cargo run --release -p rampart-core --example library -- STORE rm PATH
//! cargo run --release -p rampart-core --example library -- STORE hold FILE
//! ```
//!
//! `hold` keeps the store open (printing `open`) until a line can be read from FILE (a FIFO):
//! the end-to-end tests use it to check that a mount is refused meanwhile.
//!
//! `put` creates the parent directories, writes the file and syncs it (fsync); closing the
//! store writes a final checkpoint, so the next opener (or mount) has nothing to replay.

use std::io::Write;
use std::process::ExitCode;

use rampart_core::fs::{File, Fs};

fn run(args: &[String]) -> std::io::Result<()> {
    let usage = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "usage: library STORE (put PATH TEXT | cat PATH | ls PATH | mkdir PATH | rm PATH | hold FILE)",
        )
    };
    let (store, command, path) = match args {
        [store, command, path, ..] => (store, command.as_str(), path),
        _ => return Err(usage()),
    };
    let fs = Fs::open(store)?;
    match (command, &args[3..]) {
        ("put", [text]) => {
            if let Some(parent) = std::path::Path::new(path).parent() {
                fs.create_dir_all(parent)?;
            }
            let mut file = File::create(&fs, path)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
        }
        ("cat", []) => std::io::stdout().write_all(&fs.read(path)?)?,
        ("ls", []) => {
            for entry in fs.read_dir(path)? {
                let entry = entry?;
                let meta = fs.symlink_metadata(entry.path())?;
                println!(
                    "{:?}\t{}\t{}",
                    entry.file_type(),
                    meta.len(),
                    entry.file_name().to_string_lossy()
                );
            }
        }
        ("mkdir", []) => fs.create_dir_all(path)?,
        ("hold", []) => {
            println!("open");
            std::io::stdout().flush()?;
            // `path` is a file of the host here, not of the store.
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(std::fs::File::open(path)?),
                &mut line,
            )?;
        }
        ("rm", []) => {
            if fs.symlink_metadata(path)?.is_dir() {
                fs.remove_dir_all(path)?
            } else {
                fs.remove_file(path)?
            }
        }
        _ => return Err(usage()),
    }
    fs.close()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("library: {e}");
            ExitCode::FAILURE
        }
    }
}
