//! What the control socket pays per operator request to learn where its
//! peer comes from (issue 47 #1): `peer::origin` for a process outside the
//! swarm (the whole chain of parents up to `init`, the `no_new_privs` flag,
//! the user namespace) and for a child (one step up), and the identity it
//! records (`/proc/<pid>/exe`).
//!
//! Run with `cargo bench -p goondan-sandbox --bench peer`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_sandbox::peer::{origin, PeerIdentity};

fn peers(c: &mut Criterion) {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep starts");
    let child_pid = i32::try_from(child.id()).ok();
    let parent = std::os::unix::process::parent_id();
    let parent_pid = i32::try_from(parent).ok();
    c.bench_function("origin of a process outside the swarm", |b| {
        b.iter(|| origin(std::hint::black_box(parent_pid)))
    });
    c.bench_function("origin of a descendant", |b| {
        b.iter(|| origin(std::hint::black_box(child_pid)))
    });
    c.bench_function("identity recorded", |b| {
        b.iter(|| PeerIdentity::new(0, std::hint::black_box(parent_pid)))
    });
    let _ = child.kill();
    let _ = child.wait();
}

criterion_group!(benches, peers);
criterion_main!(benches);
