//! The registry's tarball reader: `goondan_package::tarball::unpack` into
//! a fresh folder and `read_manifest`, as `gdn install` and the registry
//! server read a package someone uploaded.

use goondan_package::tarball;
use std::path::Path;

/// Unpacks `data` as a package tarball into a temporary folder, and
/// reads its manifest without unpacking; whatever is unpacked must stay
/// inside the folder.
pub fn package_tarball(data: &[u8]) {
    let _ = tarball::read_manifest(data);
    let scratch = tempfile::tempdir().expect("a temporary folder can be made");
    let dest = scratch.path().join("package");
    let _ = tarball::unpack(data, &dest);
    assert_inside(scratch.path(), &dest);
}

/// Panics when anything under `root` is a link or lies outside `dest`:
/// an unpacked package holds plain files and folders below `dest` only.
fn assert_inside(root: &Path, dest: &Path) {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let kind = entry.file_type().expect("a listed entry has a type");
            assert!(
                !kind.is_symlink(),
                "unpacking made a link: {}",
                path.display()
            );
            assert!(
                path.starts_with(dest),
                "unpacking wrote outside its folder: {}",
                path.display()
            );
            if kind.is_dir() {
                pending.push(path);
            }
        }
    }
}
