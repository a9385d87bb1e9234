//! Paths of inodes, for messages: what a user knows a file by (fsck, recovery's log).

use std::collections::{HashMap, HashSet};

use super::State;
use crate::attr::{Ino, ROOT_INO};
use crate::namespace::inode::Inode;

impl State {
    /// A path from the root (`/a/b/f`) of each of `inos` that has a name: the first name
    /// found for a file with several. One pass over every directory, whatever their number.
    pub(crate) fn paths_of(&self, inos: &HashSet<Ino>) -> HashMap<Ino, String> {
        if inos.is_empty() {
            return HashMap::new();
        }
        // Each directory's name in its parent, and a name of each inode wanted.
        let mut dir_names: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
        let mut wanted: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
        for (dir, inode) in self.table.iter() {
            let Some(d) = inode.dir() else { continue };
            d.list_from(0, |e| {
                if self.table.get(e.ino).is_ok_and(Inode::is_dir) {
                    dir_names.insert(e.ino, (dir, e.name.to_vec()));
                }
                if inos.contains(&e.ino) {
                    wanted
                        .entry(e.ino)
                        .or_insert_with(|| (dir, e.name.to_vec()));
                }
                true
            });
        }
        let mut paths = HashMap::new();
        for (ino, (mut parent, name)) in wanted {
            let mut parts = vec![name];
            // Bounded: a tree has no longer chain than it has directories.
            let mut steps = 0;
            while parent != ROOT_INO && steps <= dir_names.len() {
                let Some((up, dir_name)) = dir_names.get(&parent) else {
                    break;
                };
                parts.push(dir_name.clone());
                parent = *up;
                steps += 1;
            }
            if parent != ROOT_INO {
                continue; // not reachable from the root: no path to give
            }
            let path: Vec<String> = parts
                .iter()
                .rev()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            paths.insert(ino, format!("/{}", path.join("/")));
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::op::Op;

    fn create(s: &mut State, parent: Ino, name: &[u8], mode: u32) -> Ino {
        let (ino, generation) = s.table.next_allocation().unwrap();
        s.apply(&Op::Create {
            parent,
            name,
            ino,
            generation,
            mode,
            uid: 0,
            gid: 0,
            rdev: 0,
            target: b"",
            time_ns: 1,
        })
        .unwrap();
        ino
    }

    #[test]
    fn paths_name_each_file_from_the_root() {
        let mut s = State::new(&EngineConfig::default());
        let a = create(&mut s, ROOT_INO, b"a", libc::S_IFDIR | 0o755);
        let b = create(&mut s, a, b"b", libc::S_IFDIR | 0o755);
        let deep = create(&mut s, b, b"f", libc::S_IFREG | 0o644);
        let top = create(&mut s, ROOT_INO, b"top", libc::S_IFREG | 0o644);
        let other = create(&mut s, a, b"other", libc::S_IFREG | 0o644);
        let paths = s.paths_of(&[deep, top].into_iter().collect());
        assert_eq!(paths.get(&deep).map(String::as_str), Some("/a/b/f"));
        assert_eq!(paths.get(&top).map(String::as_str), Some("/top"));
        assert_eq!(
            paths.len(),
            2,
            "only the inodes asked for: {paths:?} (not {other})"
        );
    }
}
