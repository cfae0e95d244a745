//! Package tarballs (`bundle_package.md` §2.7): a gzip-compressed tar
//! whose entries all sit under `package/`, holding `package/goondan.yaml`
//! or `package/dist/goondan.yaml`.
//!
//! [`pack`] builds one from a folder, byte-for-byte the same for the same
//! files (sorted entries, zero times and owners), so its integrity is
//! stable. [`unpack`] is the only way a tarball reaches the disk, on the
//! client and the registry alike, and it trusts nothing: only plain files
//! and folders, every path relative and under `package/` without `..`,
//! bounded entry count and unpacked size, and files created fresh in an
//! empty folder so nothing outside can be written through a link.

use crate::error::PackageError;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// The folder every entry sits in.
const PREFIX: &str = "package";
/// The most entries a tarball may hold.
pub const MAX_ENTRIES: usize = 10_000;
/// The most bytes a tarball may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;

/// Folders and files never packed: version control, dependencies of
/// scripts, local state and env files (which hold secrets).
fn is_skipped(name: &str) -> bool {
    matches!(name, ".git" | "node_modules" | ".goondan" | ".DS_Store")
        || name == ".env"
        || name.starts_with(".env.")
}

/// How [`collect`] treats a symlink.
#[derive(Debug, Clone, Copy)]
enum Links<'a> {
    /// Refused: a package holds only plain files and folders.
    Refuse,
    /// A link to a file inside this (canonical) folder is packed as that
    /// file; any other link is refused.
    FollowInside(&'a Path),
}

/// Packs the folder `root` as a package tarball. A symlink inside is
/// refused: what it points at would be packed as if it were the package.
pub fn pack(root: &Path) -> Result<Vec<u8>, PackageError> {
    pack_files(root, Links::Refuse)
}

/// Packs the folder `root` as a bundle a cluster distributes: as [`pack`],
/// except that a symlink to a file inside `root` is packed as that file,
/// and entries whose names start with `..` are left out. That is how a
/// Kubernetes ConfigMap volume lays files out (`goondan.yaml ->
/// ..data/goondan.yaml`), and it packs to the same bytes as the plain
/// folder. A link leaving `root`, or to a folder, is refused.
pub fn pack_bundle(root: &Path) -> Result<Vec<u8>, PackageError> {
    let canonical = root.canonicalize().map_err(PackageError::io(root))?;
    pack_files(root, Links::FollowInside(&canonical))
}

fn pack_files(root: &Path, links: Links<'_>) -> Result<Vec<u8>, PackageError> {
    let mut files = Vec::new();
    collect(root, Path::new(""), links, &mut files)?;
    if !files.iter().any(|(relative, _)| {
        relative == Path::new("goondan.yaml") || relative == Path::new("dist/goondan.yaml")
    }) {
        return Err(PackageError::ManifestInvalid {
            problem: format!(
                "{} has no goondan.yaml (or dist/goondan.yaml) to pack",
                root.display()
            ),
        });
    }
    let encoder = GzEncoder::new(Vec::new(), Compression::default());
    let mut builder = tar::Builder::new(encoder);
    builder.mode(tar::HeaderMode::Deterministic);
    for (relative, executable) in files {
        let path = root.join(&relative);
        let bytes = std::fs::read(&path).map_err(PackageError::io(&path))?;
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(if executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        let name = format!("{PREFIX}/{}", relative.to_string_lossy().replace('\\', "/"));
        builder
            .append_data(&mut header, &name, bytes.as_slice())
            .map_err(PackageError::io(&path))?;
    }
    let encoder = builder.into_inner().map_err(PackageError::io(root))?;
    encoder.finish().map_err(PackageError::io(root))
}

/// The files below `dir` (relative to the package root), sorted, with
/// whether each is executable.
fn collect(
    root: &Path,
    dir: &Path,
    links: Links<'_>,
    files: &mut Vec<(PathBuf, bool)>,
) -> Result<(), PackageError> {
    let absolute = root.join(dir);
    let mut entries: Vec<_> = std::fs::read_dir(&absolute)
        .map_err(PackageError::io(&absolute))?
        .collect::<Result<_, _>>()
        .map_err(PackageError::io(&absolute))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        let name_text = name.to_string_lossy();
        if is_skipped(&name_text)
            || (matches!(links, Links::FollowInside(_)) && name_text.starts_with(".."))
        {
            continue;
        }
        let relative = dir.join(&name);
        let file_type = entry.file_type().map_err(PackageError::io(entry.path()))?;
        if file_type.is_symlink() {
            let unsafe_link = |problem: &str| PackageError::UnsafeTarball {
                entry: relative.display().to_string(),
                problem: problem.to_string(),
            };
            let Links::FollowInside(canonical_root) = links else {
                return Err(unsafe_link(
                    "it is a symlink; a package holds only plain files and folders",
                ));
            };
            let target = entry
                .path()
                .canonicalize()
                .map_err(PackageError::io(entry.path()))?;
            if !target.starts_with(canonical_root) {
                return Err(unsafe_link("it is a symlink to a file outside the bundle"));
            }
            if !target.is_file() {
                return Err(unsafe_link(
                    "it is a symlink to a folder; only links to files are followed",
                ));
            }
            files.push((relative, is_executable(&target)));
        } else if file_type.is_dir() {
            collect(root, &relative, links, files)?;
        } else if file_type.is_file() {
            files.push((relative, is_executable(&entry.path())));
        }
        if files.len() > MAX_ENTRIES {
            return Err(PackageError::TooLarge {
                what: format!("{} ({} files or more)", root.display(), MAX_ENTRIES),
                limit: MAX_UNPACKED_BYTES,
            });
        }
    }
    Ok(())
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|metadata| metadata.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// The relative path below `package/` of a tarball entry, or why it is
/// refused.
fn entry_path(raw: &[u8]) -> Result<Option<PathBuf>, PackageError> {
    let text = String::from_utf8_lossy(raw).into_owned();
    let unsafe_entry = |problem: &str| PackageError::UnsafeTarball {
        entry: text.clone(),
        problem: problem.to_string(),
    };
    if std::str::from_utf8(raw).is_err() {
        return Err(unsafe_entry("the path is not UTF-8"));
    }
    if text.contains('\\') || text.contains('\0') {
        return Err(unsafe_entry("the path holds a backslash or NUL"));
    }
    let path = Path::new(&text);
    let mut components = path.components();
    match components.next() {
        Some(Component::Normal(first)) if first == PREFIX => {}
        Some(Component::RootDir | Component::Prefix(_)) => {
            return Err(unsafe_entry("the path is absolute"))
        }
        _ => return Err(unsafe_entry("every entry must sit under package/")),
    }
    let mut relative = PathBuf::new();
    for component in components {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_entry("the path contains `..`")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_entry("the path is absolute"))
            }
        }
    }
    Ok((!relative.as_os_str().is_empty()).then_some(relative))
}

/// Unpacks `tarball` into `dest`, which must not exist yet (it is
/// created). On error, `dest` may hold part of the package: callers
/// unpack into a staging folder and remove it on failure.
pub fn unpack(tarball: &[u8], dest: &Path) -> Result<(), PackageError> {
    std::fs::create_dir_all(dest.parent().unwrap_or(dest)).map_err(PackageError::io(dest))?;
    std::fs::create_dir(dest).map_err(PackageError::io(dest))?;
    let decoder = GzDecoder::new(tarball).take(MAX_UNPACKED_BYTES + 64 * 1024 * 1024);
    let mut archive = tar::Archive::new(decoder);
    let mut total: u64 = 0;
    let entries = archive.entries().map_err(|error| malformed(dest, error))?;
    for (count, entry) in entries.enumerate() {
        if count >= MAX_ENTRIES {
            return Err(PackageError::TooLarge {
                what: format!("the tarball ({MAX_ENTRIES} entries or more)"),
                limit: MAX_UNPACKED_BYTES,
            });
        }
        let mut entry = entry.map_err(|error| malformed(dest, error))?;
        let raw_path = entry.path_bytes().into_owned();
        let relative = entry_path(&raw_path)?;
        let entry_type = entry.header().entry_type();
        let describe = || String::from_utf8_lossy(&raw_path).into_owned();
        match entry_type {
            tar::EntryType::Directory => {
                if let Some(relative) = relative {
                    let target = dest.join(relative);
                    std::fs::create_dir_all(&target).map_err(PackageError::io(&target))?;
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let Some(relative) = relative else {
                    return Err(PackageError::UnsafeTarball {
                        entry: describe(),
                        problem: "a file cannot be the package folder itself".into(),
                    });
                };
                let size = entry
                    .header()
                    .size()
                    .map_err(|error| malformed(dest, error))?;
                total = total.saturating_add(size);
                if total > MAX_UNPACKED_BYTES {
                    return Err(PackageError::TooLarge {
                        what: "the unpacked package".into(),
                        limit: MAX_UNPACKED_BYTES,
                    });
                }
                let executable = entry.header().mode().is_ok_and(|mode| mode & 0o111 != 0);
                let target = dest.join(&relative);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(PackageError::io(parent))?;
                }
                // `create_new` never follows or replaces what is there, so
                // two entries of one name cannot write through each other.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .map_err(|source| match source.kind() {
                        std::io::ErrorKind::AlreadyExists => PackageError::UnsafeTarball {
                            entry: describe(),
                            problem: "the path appears twice".into(),
                        },
                        _ => PackageError::Io {
                            path: target.clone(),
                            source,
                        },
                    })?;
                let copied = std::io::copy(&mut (&mut entry).take(size), &mut file)
                    .map_err(|error| malformed(dest, error))?;
                if copied != size {
                    return Err(malformed(
                        dest,
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "truncated entry"),
                    ));
                }
                file.flush().map_err(PackageError::io(&target))?;
                set_mode(&target, executable)?;
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                return Err(PackageError::UnsafeTarball {
                    entry: describe(),
                    problem: "links are refused; a package holds only plain files and folders"
                        .into(),
                })
            }
            // pax and GNU long-name headers are read by the tar crate
            // itself; anything else (devices, FIFOs) has no place here.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
            other => {
                return Err(PackageError::UnsafeTarball {
                    entry: describe(),
                    problem: format!("entries of type {other:?} are refused"),
                })
            }
        }
    }
    Ok(())
}

fn set_mode(path: &Path, executable: bool) -> Result<(), PackageError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(PackageError::io(path))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, executable);
        Ok(())
    }
}

fn malformed(dest: &Path, error: std::io::Error) -> PackageError {
    PackageError::ManifestInvalid {
        problem: format!(
            "the tarball for {} is not a valid gzip tar: {error}",
            dest.display()
        ),
    }
}

/// Reads `package/goondan.yaml` (or `package/dist/goondan.yaml`, which
/// wins) from a tarball without unpacking it; bounded like [`unpack`].
pub fn read_manifest(tarball: &[u8]) -> Result<String, PackageError> {
    let decoder = GzDecoder::new(tarball).take(MAX_UNPACKED_BYTES);
    let mut archive = tar::Archive::new(decoder);
    let mut root_manifest = None;
    let entries = archive
        .entries()
        .map_err(|error| malformed(Path::new("upload"), error))?;
    for entry in entries {
        let mut entry = entry.map_err(|error| malformed(Path::new("upload"), error))?;
        let raw_path = entry.path_bytes().into_owned();
        let Some(relative) = entry_path(&raw_path)? else {
            continue;
        };
        let is_dist = relative == Path::new("dist/goondan.yaml");
        if !is_dist && relative != Path::new("goondan.yaml") {
            continue;
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > goondan_config::yaml::MAX_FILE_BYTES {
            return Err(PackageError::TooLarge {
                what: "goondan.yaml".into(),
                limit: goondan_config::yaml::MAX_FILE_BYTES,
            });
        }
        let mut text = String::new();
        entry
            .read_to_string(&mut text)
            .map_err(|error| malformed(Path::new("upload"), error))?;
        if is_dist {
            return Ok(text);
        }
        root_manifest = Some(text);
    }
    root_manifest.ok_or_else(|| PackageError::ManifestInvalid {
        problem: "the tarball holds neither package/goondan.yaml nor package/dist/goondan.yaml"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tarball with one raw entry, built past the tar crate's own path
    /// checks (which would refuse `..` when building).
    fn raw_tarball(path: &str, entry_type: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut header = tar::Header::new_old();
        {
            let bytes = header.as_old_mut();
            bytes.name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(link) = link {
                bytes.linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
        }
        header.set_entry_type(entry_type);
        header.set_size(if entry_type == tar::EntryType::Regular {
            2
        } else {
            0
        });
        header.set_mode(0o644);
        header.set_cksum();
        let mut out = Vec::new();
        out.extend_from_slice(header.as_bytes());
        if entry_type == tar::EntryType::Regular {
            let mut block = [0u8; 512];
            block[..2].copy_from_slice(b"hi");
            out.extend_from_slice(&block);
        }
        out.extend_from_slice(&[0u8; 1024]);
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(&out).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn pack_then_unpack_keeps_files_and_modes() {
        let source = tempfile::tempdir().unwrap();
        std::fs::write(source.path().join("goondan.yaml"), "kind: Package\n").unwrap();
        std::fs::create_dir(source.path().join("tools")).unwrap();
        std::fs::write(source.path().join("tools/x.js"), "1").unwrap();
        std::fs::write(source.path().join(".env"), "SECRET=1").unwrap();
        let first = pack(source.path()).unwrap();
        assert_eq!(first, pack(source.path()).unwrap(), "deterministic");
        let dest = tempfile::tempdir().unwrap();
        let target = dest.path().join("out");
        unpack(&first, &target).unwrap();
        assert_eq!(
            std::fs::read_to_string(target.join("tools/x.js")).unwrap(),
            "1"
        );
        assert!(!target.join(".env").exists(), "env files are never packed");
        assert_eq!(read_manifest(&first).unwrap(), "kind: Package\n");
    }

    #[test]
    fn hostile_entries_are_refused() {
        let cases = [
            ("package/../../evil", tar::EntryType::Regular, None),
            ("/etc/evil", tar::EntryType::Regular, None),
            ("elsewhere/x", tar::EntryType::Regular, None),
            ("package/link", tar::EntryType::Symlink, Some("/etc/passwd")),
            (
                "package/hard",
                tar::EntryType::Link,
                Some("package/../../x"),
            ),
            ("package/fifo", tar::EntryType::Fifo, None),
        ];
        for (path, entry_type, link) in cases {
            let tarball = raw_tarball(path, entry_type, link);
            let dest = tempfile::tempdir().unwrap();
            let error = unpack(&tarball, &dest.path().join("out")).unwrap_err();
            assert_eq!(error.code(), "E_PKG_PATH_TRAVERSAL", "{path}: {error}");
            assert!(!dest.path().join("evil").exists());
        }
    }

    #[test]
    #[cfg(unix)]
    fn a_bundle_mounted_as_a_config_map_packs_like_the_plain_folder() {
        use std::os::unix::fs::symlink;
        let plain = tempfile::tempdir().unwrap();
        std::fs::write(plain.path().join("goondan.yaml"), "kind: Swarm").unwrap();
        std::fs::create_dir(plain.path().join("prompts")).unwrap();
        std::fs::write(plain.path().join("prompts/a.md"), "hello").unwrap();
        // Kubernetes: each key a link into `..data`, itself a link to a
        // timestamped folder.
        let mounted = tempfile::tempdir().unwrap();
        let stamp = mounted.path().join("..2026_11_26_05_00_00.1");
        std::fs::create_dir_all(stamp.join("prompts")).unwrap();
        std::fs::write(stamp.join("goondan.yaml"), "kind: Swarm").unwrap();
        std::fs::write(stamp.join("prompts/a.md"), "hello").unwrap();
        symlink("..2026_11_26_05_00_00.1", mounted.path().join("..data")).unwrap();
        symlink("..data/goondan.yaml", mounted.path().join("goondan.yaml")).unwrap();
        std::fs::create_dir(mounted.path().join("prompts")).unwrap();
        symlink(
            "../..data/prompts/a.md",
            mounted.path().join("prompts/a.md"),
        )
        .unwrap();
        assert_eq!(
            pack_bundle(mounted.path()).unwrap(),
            pack_bundle(plain.path()).unwrap()
        );
        assert_eq!(
            pack_bundle(plain.path()).unwrap(),
            pack(plain.path()).unwrap()
        );

        // A link out of the bundle, or to a folder, is still refused.
        symlink("/etc/passwd", mounted.path().join("p")).unwrap();
        let error = pack_bundle(mounted.path()).unwrap_err();
        assert_eq!(error.code(), "E_PKG_PATH_TRAVERSAL");
        assert!(error.to_string().contains("outside the bundle"), "{error}");
        std::fs::remove_file(mounted.path().join("p")).unwrap();
        symlink("prompts", mounted.path().join("d")).unwrap();
        let error = pack_bundle(mounted.path()).unwrap_err();
        assert!(error.to_string().contains("to a folder"), "{error}");
    }

    #[test]
    fn pack_refuses_symlinks() {
        let source = tempfile::tempdir().unwrap();
        std::fs::write(source.path().join("goondan.yaml"), "x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/etc/passwd", source.path().join("p")).unwrap();
        #[cfg(unix)]
        assert_eq!(
            pack(source.path()).unwrap_err().code(),
            "E_PKG_PATH_TRAVERSAL"
        );
    }
}
