//! Keeps the committed generated code (`src/gen/*.rs`) in step with the `.proto` files.
//!
//! The test compiles `proto/**.proto` with protox (pure Rust, no system `protoc`) and
//! tonic-prost-build into a scratch directory, the messages (`src/gen/`) apart from the
//! gRPC services (`src/gen/grpc/`), and fails when any file differs from the committed one. After editing a `.proto` file, run
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

/// The Rust module each package's messages live in (`src/lib.rs`): the services refer to
/// them there, so that they can be generated apart.
const MODULES: [(&str, &str); 5] = [
    (".flow", "crate::flow"),
    (".relay", "crate::relay"),
    (".observer", "crate::observer"),
    (".goldmane", "crate::goldmane"),
    (".networkenforcer.ingest.v1", "crate::ingest"),
];

/// Generates the messages into `out` and the gRPC services (clients and servers, which need
/// tonic) into `out/grpc`, both created empty: the messages build with prost alone.
fn generate(out: &Path) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(ROOTS, [crate_dir.join("proto")]).expect("the .proto files compile");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .out_dir(out)
        .compile_fds(fds.clone())
        .expect("code generation succeeds");
    let grpc = out.join("grpc");
    fs::create_dir_all(&grpc).expect("scratch directory");
    let mut services = tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `connect(dst)` constructors: they would clash with Goldmane's
        // `FlowCollector/Connect` method, and callers build their own `Channel` (unix socket,
        // TLS) and use `new(channel)`.
        .build_transport(false)
        .out_dir(&grpc);
    for (package, module) in MODULES {
        services = services.extern_path(package, module);
    }
    services.compile_fds(fds).expect("code generation succeeds");
    // Packages without a service leave an empty file.
    for (name, text) in rust_files(&grpc) {
        if text.trim().is_empty() {
            fs::remove_file(grpc.join(name)).expect("remove an empty file");
        }
    }
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
    let gen_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gen");
    let messages = compare(&scratch, &gen_dir);
    let services = compare(&scratch.join("grpc"), &gen_dir.join("grpc"));
    let _ = fs::remove_dir_all(&scratch);
    assert_eq!(
        messages.fresh,
        [
            "flow.rs",
            "goldmane.rs",
            "networkenforcer.ingest.v1.rs",
            "observer.rs",
            "relay.rs"
        ],
        "the generator's message files"
    );
    assert_eq!(
        services.fresh,
        ["goldmane.rs", "networkenforcer.ingest.v1.rs", "observer.rs"],
        "the generator's service files"
    );
    let stale: Vec<String> = messages
        .stale
        .iter()
        .cloned()
        .chain(services.stale.iter().map(|s| format!("grpc/{s}")))
        .collect();
    if stale.is_empty() {
        return;
    }
    if std::env::var_os("NE_REGEN_PROTO").is_some() {
        messages.write();
        services.write();
        eprintln!("rewrote proto/src/gen/: {stale:?}");
        return;
    }
    panic!(
        "proto/src/gen/ is out of date with proto/proto/ ({stale:?}); run \
         `NE_REGEN_PROTO=1 cargo test -p ne-proto --test bootstrap` and commit the result"
    );
}

/// Freshly generated files against the committed ones of one directory.
struct Comparison {
    dir: PathBuf,
    files: BTreeMap<String, String>,
    fresh: Vec<String>,
    /// Files that differ, are missing, or are committed and no longer generated.
    stale: Vec<String>,
}

impl Comparison {
    /// Makes the committed directory what was generated.
    fn write(&self) {
        fs::create_dir_all(&self.dir).expect("generated code directory");
        for name in rust_files(&self.dir).keys() {
            if !self.files.contains_key(name) {
                fs::remove_file(self.dir.join(name)).expect("remove a stale generated file");
            }
        }
        for (name, text) in &self.files {
            fs::write(self.dir.join(name), text).expect("write generated file");
        }
    }
}

fn compare(fresh_dir: &Path, committed_dir: &Path) -> Comparison {
    let files = rust_files(fresh_dir);
    let committed = if committed_dir.exists() {
        rust_files(committed_dir)
    } else {
        BTreeMap::new()
    };
    let mut stale: Vec<String> = files
        .iter()
        .filter(|(name, text)| committed.get(*name) != Some(text))
        .map(|(name, _)| name.clone())
        .collect();
    stale.extend(
        committed
            .keys()
            .filter(|n| !files.contains_key(*n))
            .cloned(),
    );
    Comparison {
        dir: committed_dir.to_owned(),
        fresh: files.keys().cloned().collect(),
        files,
        stale,
    }
}
