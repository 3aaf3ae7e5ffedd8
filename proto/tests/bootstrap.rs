//! Keeps the committed generated code (`src/gen/*.rs`) in step with the `.proto` files.
//!
//! The test compiles `proto/**.proto` with protox (pure Rust, no system `protoc`) and
//! tonic-prost-build into a scratch directory and fails when any file differs from the
//! committed one. After editing a `.proto` file, run
//! `NE_REGEN_PROTO=1 cargo test -p ne-proto --test bootstrap` to rewrite `src/gen/` and
//! commit the result.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The root files; their imports (`hubble/flow.proto`, `hubble/relay.proto`) come along.
const ROOTS: [&str; 3] = [
    "hubble/observer.proto",
    "goldmane/api.proto",
    "networkenforcer/ingest/v1/ingest.proto",
];

/// Generates the code into `out` (created empty).
fn generate(out: &Path) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(ROOTS, [crate_dir.join("proto")]).expect("the .proto files compile");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `connect(dst)` constructors: they would clash with Goldmane's
        // `FlowCollector/Connect` method, and callers build their own `Channel` (unix socket,
        // TLS) and use `new(channel)`.
        .build_transport(false)
        .out_dir(out)
        .compile_fds(fds)
        .expect("code generation succeeds");
}

/// The `.rs` files of a directory, by name.
fn rust_files(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .expect("directory is readable")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let name = p
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            (
                name,
                fs::read_to_string(&p).expect("generated file is utf-8"),
            )
        })
        .collect()
}

#[test]
fn generated_code_is_up_to_date() {
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ne-proto-bootstrap-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).expect("scratch directory");
    generate(&scratch);
    let fresh = rust_files(&scratch);
    let _ = fs::remove_dir_all(&scratch);

    let gen_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gen");
    let committed = rust_files(&gen_dir);
    assert!(
        [
            "flow.rs",
            "relay.rs",
            "observer.rs",
            "goldmane.rs",
            "networkenforcer.ingest.v1.rs"
        ]
        .iter()
        .all(|f| fresh.contains_key(*f)),
        "the generator produced {:?}",
        fresh.keys().collect::<Vec<_>>()
    );

    let mut stale: Vec<&str> = fresh
        .iter()
        .filter(|(name, text)| committed.get(*name) != Some(text))
        .map(|(name, _)| name.as_str())
        .collect();
    stale.extend(
        committed
            .keys()
            .filter(|name| !fresh.contains_key(*name))
            .map(String::as_str),
    );
    if stale.is_empty() {
        return;
    }
    if std::env::var_os("NE_REGEN_PROTO").is_some() {
        for name in committed.keys().filter(|n| !fresh.contains_key(*n)) {
            fs::remove_file(gen_dir.join(name)).expect("remove a stale generated file");
        }
        for (name, text) in &fresh {
            fs::write(gen_dir.join(name), text).expect("write generated file");
        }
        eprintln!("rewrote proto/src/gen/: {stale:?}");
        return;
    }
    panic!(
        "proto/src/gen/ is out of date with proto/proto/ ({stale:?}); run \
         `NE_REGEN_PROTO=1 cargo test -p ne-proto --test bootstrap` and commit the result"
    );
}
